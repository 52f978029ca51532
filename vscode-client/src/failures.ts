/**
 * Friendly failures: what went wrong, what to tell the user, and how often.
 *
 * Pure module (no `vscode` import) so that it is unit-tested under plain node.
 * The rules: one notification per kind of failure until the user changes a
 * setting or restarts the server by hand (never a loop of popups), each with
 * the setting that fixes it; and a bounded number of automatic restarts
 * after crashes.
 */

import type { ServerLaunch } from './settings';

/** The kinds of failure the user is told about. */
export type FailureKind = 'not-found' | 'model-missing' | 'crash' | 'start-failed';

/** A notification to show: the message and the setting its button opens. */
export interface FailureNotice {
  readonly kind: FailureKind;
  readonly message: string;
  /** The setting to open (`structspec.serverPath`, ...). */
  readonly setting: string;
}

/** Where the server executable came from, in words. */
function originWords(launch: ServerLaunch): string {
  switch (launch.origin) {
    case 'serverPath':
      return `structspec.serverPath (${launch.command})`;
    case 'pythonPath':
      return `structspec.pythonPath (${launch.command})`;
    case 'PATH':
      return `"${launch.command}" on PATH`;
  }
}

/** The notice for a server executable that cannot be found. */
export function notFoundNotice(launch: ServerLaunch): FailureNotice {
  const setting = launch.origin === 'pythonPath' ? 'structspec.pythonPath' : 'structspec.serverPath';
  return {
    kind: 'not-found',
    setting,
    message:
      `structspec: cannot find the language server: ${originWords(launch)} does not exist. ` +
      'Install the structspec Python package (it provides structspec-lsp), or set structspec.serverPath to the ' +
      'structspec-lsp executable or structspec.pythonPath to a Python that has structspec.',
  };
}

/** The notice for a model file that does not exist or that the server could not load. */
export function modelMissingNotice(model: string, detail?: string): FailureNotice {
  return {
    kind: 'model-missing',
    setting: 'structspec.model',
    message:
      `structspec: cannot load the model ${JSON.stringify(model)}` +
      (detail ? `: ${detail}` : ': the file does not exist') +
      '. Set structspec.model to a GGUF file, or leave it empty for the built-in default model.',
  };
}

/** The notice shown once the restart budget is spent. */
export function crashNotice(crashes: number, lastLines: string): FailureNotice {
  const tail = lastLines.trim().split('\n').pop()?.trim();
  return {
    kind: 'crash',
    setting: 'structspec.serverPath',
    message:
      `structspec: the language server stopped ${crashes} time${crashes === 1 ? '' : 's'} and will not be restarted` +
      (tail ? ` (last message: ${tail.slice(0, 200)})` : '') +
      '. See the log, then run "structspec: Restart Server".',
  };
}

/** The notice for a server that started but failed to initialize. */
export function startFailedNotice(detail: string): FailureNotice {
  return {
    kind: 'start-failed',
    setting: 'structspec.serverPath',
    message: `structspec: the language server failed to start: ${detail.slice(0, 300)}. See the log for details.`,
  };
}

const MODEL_PATTERNS: readonly RegExp[] = [
  /model[^\n]*(not found|does not exist|no such file|cannot (open|load|read)|failed to load|not a gguf)/i,
  /(no such file|not found|does not exist)[^\n]*\.gguf/i,
  /gguf[^\n]*(invalid|corrupt|cannot|failed)/i,
];

/**
 * Did the server stop because of its model? Looks at the last lines of its
 * stderr; returns the matching line so the notice can quote it.
 */
export function modelFailureLine(stderrTail: string): string | undefined {
  const lines = stderrTail.split('\n').map((l) => l.trim()).filter((l) => l.length > 0);
  for (let i = lines.length - 1; i >= 0; i--) {
    const line = lines[i];
    if (line !== undefined && MODEL_PATTERNS.some((re) => re.test(line))) {
      return line.slice(0, 300);
    }
  }
  return undefined;
}

/** Shows each kind of notice at most once until `reset()`. */
export class NoticeGate {
  private readonly shown = new Set<FailureKind>();

  /** True the first time a kind is asked about (the caller then shows it). */
  admit(kind: FailureKind): boolean {
    if (this.shown.has(kind)) {
      return false;
    }
    this.shown.add(kind);
    return true;
  }

  /** After the user changed settings or restarted by hand: tell them again. */
  reset(): void {
    this.shown.clear();
  }
}

/** At most `maxRestarts` automatic restarts within `windowMs`. */
export class RestartBudget {
  private crashes: number[] = [];

  constructor(
    readonly maxRestarts = 3,
    readonly windowMs = 3 * 60_000,
  ) {}

  /** Record a crash at `now`; true when the server may be restarted. */
  crashed(now: number): boolean {
    this.crashes = this.crashes.filter((t) => now - t < this.windowMs);
    this.crashes.push(now);
    return this.crashes.length <= this.maxRestarts;
  }

  /** Crashes counted in the current window. */
  get count(): number {
    return this.crashes.length;
  }

  reset(): void {
    this.crashes = [];
  }
}

/** Keeps the last `maxChars` characters of a stream (the server's stderr). */
export class TailBuffer {
  private text = '';

  constructor(readonly maxChars = 4000) {}

  push(chunk: string): void {
    this.text = (this.text + chunk).slice(-this.maxChars);
  }

  get value(): string {
    return this.text;
  }

  clear(): void {
    this.text = '';
  }
}

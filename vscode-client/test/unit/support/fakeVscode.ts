/**
 * A minimal stand-in for the `vscode` module, enough to run the extension's
 * controller and vscode-languageclient under plain node. What VS Code does
 * that matters here is kept: output channels throw once disposed ("Channel
 * has been closed", as in the extension host), deactivate() is not awaited
 * before the subscriptions are disposed.
 */
import Module from 'node:module';

type Listener<T> = (e: T) => unknown;

export class EventEmitter<T> {
  private listeners: Listener<T>[] = [];
  event = (l: Listener<T>): { dispose(): void } => {
    this.listeners.push(l);
    return { dispose: () => (this.listeners = this.listeners.filter((x) => x !== l)) };
  };
  fire(e: T): void {
    for (const l of [...this.listeners]) l(e);
  }
  dispose(): void {
    this.listeners = [];
  }
}

class Disposable {
  constructor(private readonly fn: () => void = () => undefined) {}
  static from(...ds: { dispose(): unknown }[]): Disposable {
    return new Disposable(() => ds.forEach((d) => d.dispose()));
  }
  dispose(): void {
    this.fn();
  }
}

class Position {
  constructor(
    readonly line: number,
    readonly character: number,
  ) {}
}
class Range {
  constructor(
    readonly start: Position,
    readonly end: Position,
  ) {}
}

export const LogLevel = { Off: 0, Trace: 1, Debug: 2, Info: 3, Warning: 4, Error: 5 };

export interface FakeState {
  /** Explicit settings (`structspec.` stripped), as `inspect().globalValue`. */
  settings: Record<string, unknown>;
  log: string[];
  errors: string[];
  warnings: string[];
  configListeners: EventEmitter<{ affectsConfiguration(s: string): boolean }>;
  /** Errors thrown by output channels used after dispose. */
  closedChannelUses: number;
  /** The completion-menu providers the client registered. */
  completionProviders: CompletionProvider[];
}

export interface CompletionProvider {
  provideCompletionItems(document: unknown, position: unknown, context: unknown, token: unknown): unknown;
}

export const state: FakeState = {
  settings: {},
  log: [],
  errors: [],
  warnings: [],
  configListeners: new EventEmitter(),
  closedChannelUses: 0,
  completionProviders: [],
};

function outputChannel(name: string) {
  let disposed = false;
  const logLevelChanged = new EventEmitter<number>();
  const write =
    (level: string) =>
    (msg: string): void => {
      if (disposed) {
        state.closedChannelUses++;
        throw new Error('Channel has been closed');
      }
      state.log.push(`[${level}] ${msg}`);
    };
  return {
    name,
    logLevel: LogLevel.Info,
    onDidChangeLogLevel: logLevelChanged.event,
    trace: write('trace'),
    debug: write('debug'),
    info: write('info'),
    warn: write('warn'),
    error: (m: string | Error) => write('error')(String(m)),
    append: write('append'),
    appendLine: write('line'),
    replace: write('replace'),
    clear: () => undefined,
    show: () => undefined,
    hide: () => undefined,
    dispose: () => {
      disposed = true;
    },
  };
}

const noEvent = (): { dispose(): void } => ({ dispose: () => undefined });

const vscodeApi: Record<string, unknown> = {
  version: '1.91.0',
  EventEmitter,
  Disposable,
  Position,
  Range,
  LogLevel,
  Uri: { parse: (s: string) => ({ toString: () => s, scheme: s.split(':')[0] }), file: (p: string) => ({ toString: () => `file://${p}`, fsPath: p, scheme: 'file' }) },
  CancellationError: class extends Error {},
  CancellationTokenSource: class {
    token = { isCancellationRequested: false, onCancellationRequested: noEvent };
    cancel(): void {}
    dispose(): void {}
  },
  ThemeColor: class {
    constructor(readonly id: string) {}
  },
  StatusBarAlignment: { Left: 1, Right: 2 },
  ConfigurationTarget: { Global: 1, Workspace: 2, WorkspaceFolder: 3 },
  TabInputText: class {},
  TabInputTextDiff: class {},
  TabInputNotebook: class {},
  TabInputCustom: class {},
  env: { appName: 'fake', language: 'en', remoteName: undefined, openExternal: async () => true },
  window: {
    createOutputChannel: outputChannel,
    createStatusBarItem: () => ({ show() {}, hide() {}, dispose() {} }),
    showErrorMessage: async (m: string) => {
      state.errors.push(m);
      return undefined;
    },
    showWarningMessage: async (m: string) => {
      state.warnings.push(m);
      return undefined;
    },
    showInformationMessage: async () => undefined,
    setStatusBarMessage: () => ({ dispose() {} }),
    onDidChangeTextEditorSelection: noEvent,
    onDidChangeActiveTextEditor: noEvent,
    onDidChangeVisibleTextEditors: noEvent,
    visibleTextEditors: [],
    activeTextEditor: undefined,
    tabGroups: { all: [], onDidChangeTabs: noEvent },
  },
  workspace: {
    workspaceFolders: undefined,
    textDocuments: [],
    notebookDocuments: [],
    getConfiguration: (section?: string) => ({
      inspect: (key: string) => {
        const full = section === 'structspec' ? key : key.replace(/^structspec\./, '');
        return { key, globalValue: state.settings[full] };
      },
      get: (key: string, def?: unknown) => (section === 'structspec' && key in state.settings ? state.settings[key] : def),
      has: () => false,
      update: async () => undefined,
    }),
    onDidChangeConfiguration: state.configListeners.event,
    onDidOpenTextDocument: noEvent,
    onDidChangeTextDocument: noEvent,
    onDidCloseTextDocument: noEvent,
    onDidSaveTextDocument: noEvent,
    onWillSaveTextDocument: noEvent,
    onDidChangeWorkspaceFolders: noEvent,
    applyEdit: async () => true,
  },
  languages: {
    match: () => 0,
    createDiagnosticCollection: () => ({ set() {}, delete() {}, clear() {}, dispose() {} }),
    registerInlineCompletionItemProvider: () => ({ dispose() {} }),
    registerCompletionItemProvider: (_selector: unknown, provider: CompletionProvider) => {
      state.completionProviders.push(provider);
      return { dispose() {} };
    },
  },
  commands: {
    registerCommand: () => ({ dispose() {} }),
    executeCommand: async () => undefined,
  },
};

/** Anything not listed above: a harmless callable/constructible stub. */
function stub(): unknown {
  const fn = function () {
    return undefined;
  };
  return new Proxy(fn, {
    get: (_t, k) => (k === 'then' ? undefined : k === Symbol.toPrimitive ? () => 0 : stub()),
    apply: () => ({ dispose() {} }),
    construct: (_t, args, newTarget) => Reflect.construct(function () {}, args, newTarget),
  });
}

function withStubs(o: Record<string, unknown>): unknown {
  return new Proxy(o, {
    get: (t, k) => {
      if (typeof k === 'symbol' || k === 'then') return (t as Record<string | symbol, unknown>)[k];
      if (k in t) {
        const v = t[k];
        return v !== null && typeof v === 'object' && !Array.isArray(v) && k !== 'env' ? withStubs(v as Record<string, unknown>) : v;
      }
      return stub();
    },
  });
}

export const fakeVscode = withStubs(vscodeApi);

/** Make `require('vscode')` return the fake. */
export function installFakeVscode(): void {
  const M = Module as unknown as { _load: (req: string, ...rest: unknown[]) => unknown };
  const load = M._load;
  M._load = function (req: string, ...rest: unknown[]) {
    return req === 'vscode' ? fakeVscode : load.call(this, req, ...rest);
  };
}

/** Fire onDidChangeConfiguration after changing `state.settings`. */
export function changeSettings(settings: Record<string, unknown>): void {
  state.settings = settings;
  state.configListeners.fire({ affectsConfiguration: (s: string) => s === 'structspec' || s.startsWith('structspec.') });
}

/** What VS Code does on deactivation: call deactivate (not awaited), then dispose the subscriptions. */
export function deactivateLikeVsCode(
  ext: { deactivate(): Promise<void> },
  context: { subscriptions: { dispose(): unknown }[] },
): Promise<void> {
  const done = ext.deactivate();
  for (const d of context.subscriptions) d.dispose();
  return done;
}

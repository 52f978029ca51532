/**
 * Settings: from VS Code's `structspec.*` configuration to the server's command
 * line and its LSP configuration.
 *
 * Pure module (no `vscode` import) so that it is unit-tested under plain node.
 *
 * Names mirror the server's `structspec/config.py` exactly: the Python field
 * `max_tokens` is the LSP key `maxTokens` and the VS Code setting
 * `structspec.maxTokens`. Only values the user actually set (in user,
 * workspace or folder settings) are sent to the server, so that everything
 * left unset keeps the server's own value from its config file, environment
 * or defaults.
 */

import * as path from 'node:path';

/** The configuration section, shared by VS Code (`structspec.*`) and LSP. */
export const SECTION = 'structspec';

/** The shapes a server setting may take (the server's `Settings` field types). */
export type SettingKind = 'string' | 'integer' | 'boolean' | 'stringList';

/** One server setting, as declared in `server/structspec/config.py`. */
export interface ServerSettingSpec {
  /** camelCase key: the LSP and VS Code spelling. */
  readonly key: string;
  readonly kind: SettingKind;
  /** Inclusive bounds for integers (the server's `_BOUNDS`). */
  readonly min?: number;
  readonly max?: number;
  /** Changing it needs a new server process (the model is loaded at start). */
  readonly restart: boolean;
  /** The server's command-line flag for it (`structspec-lsp --help`), when it has one. */
  readonly flag?: string;
}

/** Every server setting, in the order of `Settings` in `config.py`. */
export const SERVER_SETTINGS: readonly ServerSettingSpec[] = [
  { key: 'model', kind: 'string', restart: true, flag: '--model' },
  { key: 'threads', kind: 'integer', min: 1, max: 256, restart: true, flag: '--threads' },
  // structspec-lsp has no --context-size flag: it goes in initializationOptions.
  { key: 'contextSize', kind: 'integer', min: 256, max: 131072, restart: true },
  // The server reloads the model itself when this changes.
  { key: 'widenWeights', kind: 'boolean', restart: false },
  { key: 'windowTokens', kind: 'integer', min: 0, max: 131072, restart: false },
  { key: 'maxTokens', kind: 'integer', min: 1, max: 8192, restart: false },
  { key: 'maxLatencyMs', kind: 'integer', min: 10, max: 600000, restart: false },
  { key: 'maxGenerationMs', kind: 'integer', min: 10, max: 600000, restart: false },
  { key: 'debounceMs', kind: 'integer', min: 0, max: 10000, restart: false },
  { key: 'languages', kind: 'stringList', restart: false },
  // Source names are the server's to check (it warns about and ignores unknown ones).
  { key: 'sources', kind: 'stringList', restart: false },
  // The server rebuilds its draft sources over the loaded model when the rules file changes.
  { key: 'rulesFile', kind: 'string', restart: false },
  { key: 'prefixReuse', kind: 'boolean', restart: false },
  { key: 'speculative', kind: 'boolean', restart: false },
  { key: 'tokenHealing', kind: 'boolean', restart: false },
  { key: 'projectContext', kind: 'boolean', restart: false },
  // A remote engine instead of the local model: the server switches without a restart.
  { key: 'backend', kind: 'string', restart: false, flag: '--backend' },
  { key: 'backendApiKey', kind: 'string', restart: false },
  { key: 'backendModel', kind: 'string', restart: false },
  { key: 'fimTemplate', kind: 'string', restart: false },
];

/** Settings only the client reads; changing any of them needs a new process too. */
export const CLIENT_SETTINGS = ['enable', 'serverPath', 'pythonPath', 'trace.server'] as const;

/**
 * Settings that name files on the machine running the server: scope
 * `machine-overridable` in package.json (in a remote window they are set in
 * the Remote tab).
 */
export const MACHINE_SETTINGS = ['serverPath', 'pythonPath', 'model', 'rulesFile'] as const;

/** A value of a server setting after validation. */
export type ServerValue = string | number | boolean | string[];

/** What the client needs to start and configure the server. */
export interface ClientSettings {
  /** `structspec.enable`: when false, no server runs and nothing is suggested. */
  readonly enable: boolean;
  /** `structspec.serverPath`: the `structspec-lsp` executable; empty: search PATH. */
  readonly serverPath: string;
  /** `structspec.pythonPath`: run `python -m structspec.lsp` with this interpreter. */
  readonly pythonPath: string;
  /** The server settings the user set explicitly (camelCase keys). */
  readonly server: Readonly<Record<string, ServerValue>>;
}

/**
 * Reads one setting: the value the user set explicitly in any scope, or
 * `undefined` when it is unset (VS Code's `inspect()` minus the default).
 */
export type ExplicitReader = (key: string) => unknown;

/** The scopes of VS Code's `inspect()` that hold what the user wrote. */
export interface InspectedValue {
  readonly globalValue?: unknown;
  readonly workspaceValue?: unknown;
  readonly workspaceFolderValue?: unknown;
}

/**
 * The value the user set in the most specific scope, as VS Code resolves it:
 * an explicit `null` (the documented "server's value") in a workspace
 * overrides a user value; only an absent value falls through.
 */
export function explicitValue(info: InspectedValue | undefined): unknown {
  if (info === undefined) {
    return undefined;
  }
  for (const value of [info.workspaceFolderValue, info.workspaceValue, info.globalValue]) {
    if (value !== undefined) {
      return value;
    }
  }
  return undefined;
}

/** Validation result: the settings plus one message per rejected value. */
export interface ReadResult {
  readonly settings: ClientSettings;
  readonly errors: string[];
}

function describe(value: unknown): string {
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    return String(value);
  }
}

/** A validated value, or the reason it was rejected. */
export type Validated = { readonly ok: true; readonly value: ServerValue } | { readonly ok: false; readonly error: string };

/** Validate one server value like the server's `_coerce` does. */
export function validateServerValue(spec: ServerSettingSpec, value: unknown): Validated {
  const name = `${SECTION}.${spec.key}`;
  const fail = (error: string): Validated => ({ ok: false, error });
  switch (spec.kind) {
    case 'string':
      return typeof value === 'string' ? { ok: true, value: value.trim() } : fail(`${name} must be a string, not ${describe(value)}`);
    case 'boolean':
      return typeof value === 'boolean' ? { ok: true, value } : fail(`${name} must be true or false, not ${describe(value)}`);
    case 'integer': {
      if (typeof value !== 'number' || !Number.isInteger(value)) {
        return fail(`${name} must be an integer, not ${describe(value)}`);
      }
      const lo = spec.min ?? Number.MIN_SAFE_INTEGER;
      const hi = spec.max ?? Number.MAX_SAFE_INTEGER;
      if (value < lo || value > hi) {
        return fail(`${name} must be between ${lo} and ${hi}, not ${value}`);
      }
      return { ok: true, value };
    }
    case 'stringList': {
      if (!Array.isArray(value) || !value.every((v): v is string => typeof v === 'string')) {
        return fail(`${name} must be a list of strings, not ${describe(value)}`);
      }
      const items = value.map((v) => v.trim()).filter((v) => v.length > 0);
      return { ok: true, value: items };
    }
  }
}

/**
 * Read and validate every setting. A bad value is reported and left out, so
 * the server keeps its own value for it (never a crash, never a half-set value).
 */
export function readSettings(read: ExplicitReader): ReadResult {
  const errors: string[] = [];
  const server: Record<string, ServerValue> = {};
  for (const spec of SERVER_SETTINGS) {
    const raw = read(spec.key);
    if (raw === undefined || raw === null) {
      continue;
    }
    const result = validateServerValue(spec, raw);
    if (result.ok) {
      server[spec.key] = result.value;
    } else {
      errors.push(`${result.error}; using the server's value`);
    }
  }
  const text = (key: string): string => {
    const raw = read(key);
    if (raw === undefined || raw === null) {
      return '';
    }
    if (typeof raw !== 'string') {
      errors.push(`${SECTION}.${key} must be a string, not ${describe(raw)}; ignoring it`);
      return '';
    }
    return raw.trim();
  };
  const enableRaw = read('enable');
  let enable = true;
  if (typeof enableRaw === 'boolean') {
    enable = enableRaw;
  } else if (enableRaw !== undefined && enableRaw !== null) {
    errors.push(`${SECTION}.enable must be true or false, not ${describe(enableRaw)}; using true`);
  }
  return { settings: { enable, serverPath: text('serverPath'), pythonPath: text('pythonPath'), server }, errors };
}

/** Expand a leading `~` (VS Code does not; users write it anyway). */
export function expandHome(p: string, home: string): string {
  if (p === '~') {
    return home;
  }
  if (p.startsWith('~/') || p.startsWith('~\\')) {
    return path.join(home, p.slice(2));
  }
  return p;
}

/**
 * Is this model setting a file path the client should check before starting?
 * Empty is the embedded default model; `standin` / `standin:SEED` is the
 * server's deterministic toy model.
 */
export function modelFilePath(model: string | undefined, home: string, cwd: string | undefined): string | undefined {
  if (model === undefined || model === '' || model === 'standin' || /^standin:\d+$/.test(model)) {
    return undefined;
  }
  const expanded = expandHome(model, home);
  return path.isAbsolute(expanded) || cwd === undefined ? expanded : path.resolve(cwd, expanded);
}

/** How to start the server. */
export interface ServerLaunch {
  readonly command: string;
  readonly args: string[];
  /** Which setting (or PATH) the command came from: named in error messages. */
  readonly origin: 'serverPath' | 'pythonPath' | 'PATH';
}

/** The executable name looked up on PATH when no setting names one. */
export const SERVER_EXECUTABLE = 'structspec-lsp';

/**
 * An executable setting (serverPath, pythonPath) as a command: a leading `~`
 * expanded, a relative path with a separator resolved against the workspace
 * folder; a bare name is left for the PATH search.
 */
export function commandPath(value: string, home: string | undefined, cwd: string | undefined): string {
  const expanded = home === undefined ? value : expandHome(value, home);
  const hasSeparator = expanded.includes('/') || expanded.includes(path.sep);
  if (!hasSeparator || path.isAbsolute(expanded) || cwd === undefined) {
    return expanded;
  }
  return path.resolve(cwd, expanded);
}

/**
 * The server's command line for these settings. `resolvedModel` replaces the
 * model value (home-expanded, made absolute) when given; with `home` and
 * `cwd`, serverPath and pythonPath are resolved like the model (`commandPath`).
 */
export function serverLaunch(settings: ClientSettings, resolvedModel?: string, home?: string, cwd?: string): ServerLaunch {
  const flags: string[] = ['--stdio'];
  for (const spec of SERVER_SETTINGS) {
    if (spec.flag === undefined) {
      continue;
    }
    let value = settings.server[spec.key];
    if (spec.key === 'model' && resolvedModel !== undefined) {
      value = resolvedModel;
    }
    if (value === undefined || value === '') {
      continue;
    }
    flags.push(spec.flag, String(value));
  }
  if (settings.serverPath !== '') {
    return { command: commandPath(settings.serverPath, home, cwd), args: flags, origin: 'serverPath' };
  }
  if (settings.pythonPath !== '') {
    return { command: commandPath(settings.pythonPath, home, cwd), args: ['-m', 'structspec.lsp', ...flags], origin: 'pythonPath' };
  }
  return { command: SERVER_EXECUTABLE, args: flags, origin: 'PATH' };
}

/**
 * The server's configuration (LSP section `structspec`): the explicitly set
 * server settings, client-only keys left out (the server rejects unknown keys).
 * With `home`, a leading `~` in file paths is expanded.
 */
export function serverConfiguration(settings: ClientSettings, home?: string): Record<string, ServerValue> {
  const out: Record<string, ServerValue> = {};
  for (const spec of SERVER_SETTINGS) {
    let value = settings.server[spec.key];
    // File paths: expand `~` here, the server takes paths literally.
    if (home !== undefined && typeof value === 'string' && (MACHINE_SETTINGS as readonly string[]).includes(spec.key)) {
      value = expandHome(value, home);
    }
    if (value !== undefined) {
      out[spec.key] = Array.isArray(value) ? [...value] : value;
    }
  }
  return out;
}

/** What a settings change asks the client to do. */
export type ChangeAction = 'none' | 'start' | 'stop' | 'restart' | 'configure';

function same(a: ServerValue | undefined, b: ServerValue | undefined): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}

/**
 * Decide what a change from `before` to `after` needs: a new process for the
 * model, threads, context size or executable; only a configuration
 * notification for the rest.
 *
 * `started` is what the running server got as `initializationOptions` (by
 * default `before`). The server layers `didChangeConfiguration` over those and
 * skips absent or null keys, so a setting the server started with cannot be
 * taken back by a notification: unsetting it (or making it invalid) needs a
 * new process too.
 */
export function changeAction(before: ClientSettings, after: ClientSettings, started: ClientSettings = before): ChangeAction {
  if (before.enable !== after.enable) {
    return after.enable ? 'start' : 'stop';
  }
  if (!after.enable) {
    return 'none';
  }
  if (before.serverPath !== after.serverPath || before.pythonPath !== after.pythonPath) {
    return 'restart';
  }
  let configure = false;
  for (const spec of SERVER_SETTINGS) {
    if (!same(before.server[spec.key], after.server[spec.key])) {
      if (spec.restart || (after.server[spec.key] === undefined && started.server[spec.key] !== undefined)) {
        return 'restart';
      }
      configure = true;
    }
  }
  return configure ? 'configure' : 'none';
}

/**
 * Find an executable the way a shell would: a path with a separator is taken
 * as is; a bare name is searched on PATH (with PATHEXT on Windows).
 * `isExecutable` is injected so this stays pure.
 */
export function findExecutable(
  command: string,
  envPath: string | undefined,
  isExecutable: (candidate: string) => boolean,
  platform: NodeJS.Platform = process.platform,
  pathExt: string | undefined = undefined,
): string | undefined {
  const exts = platform === 'win32' ? ['', ...(pathExt ?? '.EXE;.CMD;.BAT;.COM').split(';').filter(Boolean)] : [''];
  const hasSeparator = command.includes('/') || (platform === 'win32' && command.includes('\\'));
  if (hasSeparator) {
    for (const ext of exts) {
      if (isExecutable(command + ext)) {
        return command + ext;
      }
    }
    return undefined;
  }
  const dirs = (envPath ?? '').split(platform === 'win32' ? ';' : ':').filter((d) => d.length > 0);
  for (const dir of dirs) {
    for (const ext of exts) {
      const candidate = path.join(dir, command + ext);
      if (isExecutable(candidate)) {
        return candidate;
      }
    }
  }
  return undefined;
}

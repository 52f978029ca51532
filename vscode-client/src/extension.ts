/**
 * The structspec VS Code extension: starts `structspec-lsp --stdio`, keeps it
 * configured from the `structspec.*` settings, shows its state in the status
 * bar, and explains failures once, with the setting that fixes them.
 *
 * All completion logic lives in the server. Inline completions come from
 * vscode-languageclient's built-in inline completion feature (>= 10.0.1); an
 * accepted item runs its `structspec.accept` command, which the client
 * library forwards to the server as `workspace/executeCommand`.
 */

import { spawn, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as vscode from 'vscode';
import {
  CloseAction,
  DidChangeConfigurationNotification,
  ErrorAction,
  LanguageClient,
  State,
  type CloseHandlerResult,
  type ErrorHandlerResult,
  type LanguageClientOptions,
  type Message,
} from 'vscode-languageclient/node';
import { CURSOR_NOTIFICATION, cursorParams, CursorReporter, declareCursorReport, reportsCursorIn, SYNCED_SCHEMES, type CursorPlace } from './cursor';
import {
  crashNotice,
  modelFailureLine,
  modelMissingNotice,
  notFoundNotice,
  NoticeGate,
  RestartBudget,
  startFailedNotice,
  TailBuffer,
  type FailureNotice,
} from './failures';
import {
  changeAction,
  explicitValue,
  findExecutable,
  MACHINE_SETTINGS,
  modelFilePath,
  readSettings,
  SECTION,
  serverConfiguration,
  serverLaunch,
  type ClientSettings,
  type ServerLaunch,
} from './settings';
import {
  ACCEPT_COMMAND,
  parseStatus,
  STATUS_NOTIFICATION,
  statusView,
  withAcceptResult,
  type DisplayState,
  type ServerStatus,
} from './status';

/**
 * A LanguageClient whose own error popups are routed to the log only: the
 * controller decides what the user is told (one friendly notice per kind).
 */
class StructspecClient extends LanguageClient {
  override error(message: string, data?: unknown, _showNotification?: boolean | 'force'): void {
    super.error(message, data, false);
  }
}

/** Read the settings the user set explicitly (any scope), defaults excluded. */
function currentSettings(): { settings: ClientSettings; errors: string[] } {
  const config = vscode.workspace.getConfiguration(SECTION);
  // The most specific scope wins, as in VS Code itself (an explicit null included).
  return readSettings((key) => explicitValue(config.inspect(key)));
}

function isExecutableFile(candidate: string): boolean {
  try {
    const st = fs.statSync(candidate);
    if (!st.isFile()) {
      return false;
    }
    if (process.platform === 'win32') {
      return true;
    }
    fs.accessSync(candidate, fs.constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/**
 * Open the settings editor at `key`. File paths (serverPath, pythonPath, model, rulesFile) are
 * machine settings: in a remote window (code-server, SSH) they live in the
 * Remote tab, where the User tab would show "No Settings Found".
 */
function revealSetting(key: string): void {
  const name = key.startsWith(`${SECTION}.`) ? key.slice(SECTION.length + 1) : key;
  if (vscode.env.remoteName !== undefined && (MACHINE_SETTINGS as readonly string[]).includes(name)) {
    void vscode.commands.executeCommand('workbench.action.openRemoteSettings', { query: key });
  } else {
    void vscode.commands.executeCommand('workbench.action.openSettings', key);
  }
}

function workspaceCwd(): string | undefined {
  const folder = vscode.workspace.workspaceFolders?.find((f) => f.uri.scheme === 'file');
  return folder?.uri.fsPath;
}

/** Owns the language client, the status bar item and the failure notices. */
class Controller implements vscode.Disposable {
  private client: StructspecClient | undefined;
  private settings: ClientSettings;
  private readonly output: vscode.LogOutputChannel;
  private readonly statusItem: vscode.StatusBarItem;
  private readonly gate = new NoticeGate();
  private readonly budget = new RestartBudget();
  private readonly stderrTail = new TailBuffer();
  private lastStatus: ServerStatus | undefined;
  private displayState: DisplayState = 'stopped';
  private displayDetail: string | undefined;
  private spawnError: Error | undefined;
  /** The running server process and a promise settled when it ends. */
  private child: ChildProcess | undefined;
  private childEnded: Promise<void> = Promise.resolve();
  /** Processes the client stopped itself (their exit is no news). */
  private readonly stoppedOnPurpose = new WeakSet<ChildProcess>();
  /** Clients whose end was already handled (the library and start() may both report it). */
  private readonly gone = new WeakSet<StructspecClient>();
  private lastSettingsErrors = '';
  /** Start/stop/restart run one at a time, in order. */
  private queue: Promise<void> = Promise.resolve();
  private stopping = false;
  /** The settings the running server got as initializationOptions. */
  private startedWith: ClientSettings | undefined;
  /** The client whose start() is awaited, and one whose start was cut short on purpose. */
  private pendingStart: StructspecClient | undefined;
  private abortedStart: StructspecClient | undefined;
  /** The automatic restart after a crash, until it runs. */
  private restartTimer: ReturnType<typeof setTimeout> | undefined;
  /** Set by close(): the extension is going away, nothing starts any more. */
  private closing: Promise<void> | undefined;
  /** Reports where the cursor rests, so the server pre-warms there. */
  private readonly cursor = new CursorReporter((place) => this.sendCursor(place));

  constructor() {
    this.output = vscode.window.createOutputChannel('structspec', { log: true });
    this.statusItem = vscode.window.createStatusBarItem('structspec.status', vscode.StatusBarAlignment.Right, 100);
    this.statusItem.name = 'structspec';
    this.statusItem.command = 'structspec.showLog';
    const { settings, errors } = currentSettings();
    this.settings = settings;
    this.reportSettingsErrors(errors);
    this.render();
    this.statusItem.show();
  }

  /** Run `op` after every operation queued before it. */
  private enqueue(op: () => Promise<void>): Promise<void> {
    this.queue = this.queue.then(op).catch((err: unknown) => {
      this.output.error(`structspec: ${err instanceof Error ? err.message : String(err)}`);
    });
    return this.queue;
  }

  private setDisplay(state: DisplayState, detail?: string): void {
    this.displayState = state;
    this.displayDetail = detail;
    this.render();
  }

  private render(): void {
    const view = statusView(this.displayState, this.lastStatus, this.displayDetail);
    this.statusItem.text = view.text;
    this.statusItem.tooltip = view.tooltip;
    this.statusItem.backgroundColor = view.error ? new vscode.ThemeColor('statusBarItem.errorBackground') : undefined;
  }

  /** Show a failure notice unless this kind was already shown; the button opens its setting. */
  private notify(notice: FailureNotice): void {
    this.output.error(notice.message);
    this.setDisplay('error', notice.message.replace(/^structspec: /, ''));
    if (!this.gate.admit(notice.kind)) {
      return;
    }
    const openSetting = 'Open Setting';
    const showLog = 'Show Log';
    void vscode.window.showErrorMessage(notice.message, openSetting, showLog).then((choice) => {
      if (choice === openSetting) {
        revealSetting(notice.setting);
      } else if (choice === showLog) {
        this.output.show(true);
      }
    });
  }

  private reportSettingsErrors(errors: string[]): void {
    const joined = errors.join('\n');
    if (joined === this.lastSettingsErrors) {
      return;
    }
    this.lastSettingsErrors = joined;
    if (errors.length === 0) {
      return;
    }
    for (const e of errors) {
      this.output.warn(e);
    }
    const open = 'Open Settings';
    void vscode.window.showWarningMessage(`structspec: ${errors[0]}`, open).then((choice) => {
      if (choice === open) {
        void vscode.commands.executeCommand('workbench.action.openSettings', SECTION);
      }
    });
  }

  /** Start the server when enabled (no-op when one is running). */
  start(): Promise<void> {
    return this.enqueue(() => this.doStart());
  }

  stop(): Promise<void> {
    this.abortStart();
    return this.enqueue(() => this.doStop());
  }

  /**
   * A server that has not answered initialize would hold the queue (and with
   * it every stop, restart and toggle) for as long as it hangs: end it now.
   */
  private abortStart(): void {
    const client = this.pendingStart;
    const child = this.child;
    if (client === undefined || child === undefined || child.exitCode !== null || child.signalCode !== null) {
      return;
    }
    this.output.info('Stopping the server before it finished starting');
    this.abortedStart = client;
    this.stoppedOnPurpose.add(child);
    child.kill();
  }

  /** Restart by hand: failures may be told again, and the restart budget is fresh. */
  restart(): Promise<void> {
    this.gate.reset();
    this.budget.reset();
    this.abortStart();
    return this.enqueue(async () => {
      await this.doStop();
      await this.doStart();
    });
  }

  private async doStart(): Promise<void> {
    if (this.client !== undefined || this.closing !== undefined) {
      return;
    }
    const settings = this.settings;
    if (!settings.enable) {
      this.setDisplay('off');
      return;
    }
    const cwd = workspaceCwd();
    const modelPath = modelFilePath(settings.server.model as string | undefined, os.homedir(), cwd);
    if (modelPath !== undefined && !fs.existsSync(modelPath)) {
      this.notify(modelMissingNotice(String(settings.server.model)));
      return;
    }
    const launch = serverLaunch(settings, modelPath, os.homedir(), cwd);
    const resolved = findExecutable(launch.command, process.env.PATH, isExecutableFile, process.platform, process.env.PATHEXT);
    if (resolved === undefined) {
      this.notify(notFoundNotice(launch));
      return;
    }
    this.output.info(`Starting ${resolved} ${launch.args.join(' ')}` + (cwd ? ` (in ${cwd})` : ''));
    this.setDisplay('starting');
    const client = this.createClient(launch, resolved, cwd, settings, modelPath);
    this.client = client;
    this.startedWith = settings;
    this.pendingStart = client;
    try {
      await client.start();
    } catch (err: unknown) {
      if (this.abortedStart === client) {
        // Stopped on purpose while starting (stop, restart, deactivate): no failure to tell.
        this.client = undefined;
        await client.dispose().catch(() => undefined);
        const child = this.child;
        if (child !== undefined && child.exitCode === null && child.signalCode === null) {
          await Promise.race([this.childEnded, new Promise((r) => setTimeout(r, 2000))]);
          if (child.exitCode === null && child.signalCode === null) {
            child.kill('SIGKILL');
          }
        }
        this.setDisplay(this.settings.enable ? 'stopped' : 'off');
        return;
      }
      await this.serverGone(client, launch, settings, err);
      return;
    } finally {
      this.pendingStart = undefined;
    }
    if (this.displayState === 'starting') {
      this.setDisplay('idle');
    }
  }

  private async doStop(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    if (client === undefined) {
      this.setDisplay(this.settings.enable ? 'stopped' : 'off');
      return;
    }
    this.stopping = true;
    const child = this.child;
    if (child !== undefined) {
      this.stoppedOnPurpose.add(child);
    }
    try {
      if (client.isRunning()) {
        await client.stop(5000);
      }
    } catch (err: unknown) {
      this.output.warn(`Stopping the server: ${err instanceof Error ? err.message : String(err)}`);
    } finally {
      await client.dispose().catch(() => undefined);
      // A server that ignores shutdown/exit does not outlive its client.
      if (child !== undefined && child.exitCode === null && child.signalCode === null) {
        await Promise.race([this.childEnded, new Promise((r) => setTimeout(r, 2000))]);
        if (child.exitCode === null && child.signalCode === null) {
          child.kill();
        }
      }
      this.stopping = false;
    }
    this.setDisplay(this.settings.enable ? 'stopped' : 'off');
  }

  private spawnServer(resolved: string, launch: ServerLaunch, cwd: string | undefined): Promise<ChildProcess> {
    this.spawnError = undefined;
    this.stderrTail.clear();
    const child = spawn(resolved, launch.args, {
      cwd,
      env: { ...process.env, PYTHONUNBUFFERED: '1' },
      stdio: ['pipe', 'pipe', 'pipe'],
      // Windows needs a shell for .cmd/.bat wrappers; nowhere else.
      shell: process.platform === 'win32' && /\.(cmd|bat)$/i.test(resolved),
    });
    this.child = child;
    this.childEnded = new Promise<void>((resolve) => {
      child.once('exit', () => resolve());
      child.once('error', () => resolve());
    });
    child.on('error', (err) => {
      this.spawnError = err;
      this.output.error(`Cannot run ${resolved}: ${err.message}`);
    });
    child.on('exit', (code, signal) => {
      const how = signal ?? `code ${String(code)}`;
      if (this.stoppedOnPurpose.has(child)) {
        this.output.info(`structspec-lsp stopped (${how})`);
      } else {
        this.output.warn(`structspec-lsp exited (${how})`);
      }
    });
    child.stderr?.setEncoding('utf8');
    child.stderr?.on('data', (chunk: string) => this.stderrTail.push(chunk));
    return Promise.resolve(child);
  }

  private createClient(
    launch: ServerLaunch,
    resolved: string,
    cwd: string | undefined,
    settings: ClientSettings,
    modelPath: string | undefined,
  ): StructspecClient {
    const config = (): Record<string, unknown> => {
      const c: Record<string, unknown> = serverConfiguration(this.settings, os.homedir());
      if (modelPath !== undefined && typeof c.model === 'string') {
        c.model = modelPath;
      }
      return c;
    };
    const clientOptions: LanguageClientOptions = {
      // Every file, untitled buffer and notebook cell is synced: the server
      // completes only the languages in structspec.languages, and reads other
      // buffers as draft corpus.
      documentSelector: SYNCED_SCHEMES.map((scheme) => ({ scheme })),
      outputChannel: this.output,
      // structspec.trace.server logs the messages into the same log.
      traceOutputChannel: this.output,
      initializationOptions: config(),
      errorHandler: {
        error: (error: Error, _message: Message | undefined, count: number | undefined): ErrorHandlerResult => {
          this.output.error(`Connection error: ${error.message}`);
          return (count ?? 0) <= 3
            ? { action: ErrorAction.Continue, handled: true }
            : { action: ErrorAction.Shutdown, handled: true };
        },
        // The controller restarts (bounded) and explains; the library never restarts.
        closed: (): CloseHandlerResult => {
          if (!this.stopping) {
            void this.enqueue(() => this.serverGone(client, launch, settings));
          }
          return { action: CloseAction.DoNotRestart, handled: true };
        },
      },
      initializationFailedHandler: (error: unknown): boolean => {
        this.output.error(`Initialization failed: ${error instanceof Error ? error.message : String(error)}`);
        return false;
      },
      middleware: {
        // The suggestion is the ghost text. As an item of VS Code's completion menu
        // too it would repeat it, preselected (Enter would insert it), and its
        // request, made beside each inline one, would cancel that one's generation
        // whenever the menu's selected item is another: the server answers an inline
        // request after that item. The menu is asked only by clients without ghost text.
        provideCompletionItem: () => undefined,
        // An item without a range would replace the word before the cursor
        // (VS Code's default), which hides a suggestion that continues that
        // word. structspec suggests insertions at the cursor: say so.
        provideInlineCompletionItems: async (document, position, context, token, next) => {
          const result = await next(document, position, context, token);
          if (result === null || result === undefined) {
            return result;
          }
          const items = Array.isArray(result) ? result : result.items;
          for (const item of items) {
            if (item.range === undefined) {
              item.range = new vscode.Range(position, position);
            }
          }
          return result;
        },
        // The answer of structspec.accept carries the new acceptance: show it now.
        executeCommand: async (command, args, next) => {
          const result: unknown = await next(command, args);
          if (command === ACCEPT_COMMAND) {
            this.lastStatus = withAcceptResult(this.lastStatus, result);
            this.render();
          }
          return result;
        },
        workspace: {
          // The server may pull its section: answer with server keys only
          // (client-only keys such as serverPath would be unknown to it).
          configuration: async (params, token, next) => {
            const result = await next(params, token);
            if (!Array.isArray(result)) {
              return result;
            }
            return params.items.map((item, i) => {
              if (item.section === SECTION) {
                return config();
              }
              if (item.section?.startsWith(`${SECTION}.`)) {
                return config()[item.section.slice(SECTION.length + 1)] ?? null;
              }
              return result[i];
            });
          },
        },
      },
    };
    const client = new StructspecClient(
      'structspec',
      'structspec',
      () => this.spawnServer(resolved, launch, cwd),
      clientOptions,
    );
    // This client reports the cursor (structspec/didMoveCursor): say so at initialize.
    client.registerFeature({
      fillClientCapabilities: declareCursorReport,
      initialize: () => undefined,
      getState: () => ({ kind: 'static' }),
      clear: () => undefined,
    });
    client.onNotification(STATUS_NOTIFICATION, (params: unknown) => this.onStatus(params));
    client.onDidChangeState((e) => {
      if (this.client !== client) {
        return;
      }
      if (e.newState === State.Running && this.displayState !== 'error') {
        this.setDisplay(this.lastStatus?.state ?? 'idle');
      } else if (e.newState === State.Starting) {
        this.setDisplay('starting');
      }
    });
    return client;
  }

  /**
   * The server ended without being asked to, or never finished starting:
   * explain why once, and restart it a bounded number of times.
   */
  private async serverGone(client: StructspecClient, launch: ServerLaunch, settings: ClientSettings, startError?: unknown): Promise<void> {
    if (this.stopping || this.gone.has(client) || this.abortedStart === client || this.closing !== undefined) {
      return;
    }
    this.gone.add(client);
    if (this.client === client) {
      this.client = undefined;
    }
    // Let the process finish writing stderr (the reason is often there).
    await Promise.race([this.childEnded, new Promise((r) => setTimeout(r, 2000))]);
    const child = this.child;
    const stillRunning = child !== undefined && child.exitCode === null && child.signalCode === null && this.spawnError === undefined;
    await client.dispose(2000).catch(() => undefined);
    if (stillRunning) {
      child.kill();
    }
    if (this.spawnError !== undefined) {
      const code = (this.spawnError as NodeJS.ErrnoException).code;
      this.notify(code === 'ENOENT' || code === 'EACCES' ? notFoundNotice(launch) : startFailedNotice(this.spawnError.message));
      return;
    }
    const modelLine = modelFailureLine(this.stderrTail.value);
    if (modelLine !== undefined) {
      this.notify(modelMissingNotice(String(settings.server.model ?? '(default model)'), modelLine));
      return;
    }
    if (stillRunning) {
      // It runs but does not speak LSP on stdio: restarting will not help.
      const detail = startError instanceof Error ? startError.message : String(startError ?? 'no answer');
      this.notify(startFailedNotice(detail));
      return;
    }
    if (this.budget.crashed(Date.now())) {
      const n = this.budget.count;
      this.output.warn(`The language server stopped; restarting it (${n}/${this.budget.maxRestarts})`);
      this.setDisplay('starting');
      this.restartTimer = setTimeout(() => {
        this.restartTimer = undefined;
        void this.start();
      }, 500 * n);
      return;
    }
    this.notify(crashNotice(this.budget.count, this.stderrTail.value));
  }

  private onStatus(params: unknown): void {
    const status = parseStatus(params);
    if (status === undefined) {
      this.output.debug(`Ignoring a malformed ${STATUS_NOTIFICATION}: ${JSON.stringify(params)}`);
      return;
    }
    this.lastStatus = status;
    if (status.state === 'error') {
      // The server has already told the user (window/showMessage): no second popup.
      this.output.error(status.message ?? 'the server reported an error');
      this.setDisplay('error', status.message?.replace(/^structspec: /, '') ?? 'the server reported an error');
      return;
    }
    this.setDisplay(status.state);
  }

  /** React to a change of `structspec.*`: restart, start, stop or reconfigure. */
  onConfigurationChanged(): void {
    const { settings, errors } = currentSettings();
    this.reportSettingsErrors(errors);
    const action = changeAction(this.settings, settings, this.client !== undefined ? this.startedWith : undefined);
    this.settings = settings;
    if (action !== 'none') {
      this.output.info(`Settings changed: ${action}`);
    }
    switch (action) {
      case 'none':
        return;
      case 'start':
        this.gate.reset();
        this.budget.reset();
        void this.start();
        return;
      case 'stop':
        void this.stop();
        return;
      case 'restart':
        void this.restart();
        return;
      case 'configure':
        void this.enqueue(async () => {
          const client = this.client;
          if (client === undefined) {
            // Not running (e.g. after a failure): a settings change is a new try.
            this.gate.reset();
            this.budget.reset();
            await this.doStart();
            return;
          }
          if (!client.isRunning()) {
            return;
          }
          const config = serverConfiguration(settings, os.homedir());
          await client.sendNotification(DidChangeConfigurationNotification.type, { settings: { [SECTION]: config } });
        });
        return;
    }
  }

  /** Flip `structspec.enable` where it is set (workspace if set there, else user). */
  async toggle(): Promise<void> {
    const config = vscode.workspace.getConfiguration(SECTION);
    const info = config.inspect<boolean>('enable');
    const target =
      info?.workspaceFolderValue !== undefined
        ? vscode.ConfigurationTarget.WorkspaceFolder
        : info?.workspaceValue !== undefined
          ? vscode.ConfigurationTarget.Workspace
          : vscode.ConfigurationTarget.Global;
    const next = !this.settings.enable;
    await config.update('enable', next, target);
    vscode.window.setStatusBarMessage(`structspec: completions ${next ? 'on' : 'off'}`, 3000);
  }

  showLog(): void {
    this.output.show(true);
  }

  /** The selection of ``editor`` changed (or it became active). */
  cursorMoved(editor: vscode.TextEditor | undefined): void {
    const selection = editor?.selections.length === 1 ? editor.selections[0] : undefined;
    if (editor === undefined || selection === undefined || !selection.isEmpty || !reportsCursorIn(editor.document.uri.scheme)) {
      return;
    }
    const at = selection.active;
    this.cursor.moved({ uri: editor.document.uri.toString(), line: at.line, character: at.character });
  }

  edited(document: vscode.TextDocument): void {
    this.cursor.edited(document.uri.toString());
  }

  closed(document: vscode.TextDocument): void {
    this.cursor.closed(document.uri.toString());
  }

  private sendCursor(place: CursorPlace): void {
    const client = this.client;
    if (client !== undefined && client.isRunning() && this.settings.enable) {
      void client.sendNotification(CURSOR_NOTIFICATION, cursorParams(place)).catch(() => undefined);
    }
  }

  /**
   * The extension is going away: no more starts (a pending crash restart
   * included), a hung start is cut short, the server is stopped.
   */
  close(): Promise<void> {
    if (this.closing === undefined) {
      this.cursor.stop();
      if (this.restartTimer !== undefined) {
        clearTimeout(this.restartTimer);
        this.restartTimer = undefined;
      }
      this.abortStart();
      this.closing = this.enqueue(() => this.doStop());
    }
    return this.closing;
  }

  /**
   * VS Code disposes the subscriptions right after calling deactivate(),
   * without awaiting it: the log and the item are released only once the
   * server is stopped (stopping still writes to the log, and a disposed
   * channel throws "Channel has been closed").
   */
  dispose(): void {
    void this.close().finally(() => {
      this.statusItem.dispose();
      this.output.dispose();
    });
  }
}

let controller: Controller | undefined;

export function activate(context: vscode.ExtensionContext): void {
  const c = new Controller();
  controller = c;
  context.subscriptions.push(
    c,
    vscode.commands.registerCommand('structspec.toggle', () => c.toggle()),
    vscode.commands.registerCommand('structspec.restart', () => c.restart()),
    vscode.commands.registerCommand('structspec.showLog', () => c.showLog()),
    vscode.workspace.onDidChangeConfiguration((e) => {
      if (e.affectsConfiguration(SECTION)) {
        c.onConfigurationChanged();
      }
    }),
    vscode.window.onDidChangeTextEditorSelection((e) => c.cursorMoved(e.textEditor)),
    vscode.window.onDidChangeActiveTextEditor((editor) => c.cursorMoved(editor)),
    vscode.workspace.onDidChangeTextDocument((e) => c.edited(e.document)),
    vscode.workspace.onDidCloseTextDocument((document) => c.closed(document)),
  );
  void c.start();
}

export async function deactivate(): Promise<void> {
  const c = controller;
  controller = undefined;
  if (c !== undefined) {
    await c.close();
  }
}

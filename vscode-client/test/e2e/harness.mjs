// Shared harness of the VS Code end-to-end tests: a fresh code-server with the
// built .vsix installed, opened in headless Chromium through playwright-core.
//
// Environment (all optional):
//   CODE_SERVER             code-server executable
//                           (default: ~/.cache/structspec-vscode-e2e/code-server/node_modules/.bin/code-server)
//   CHROMIUM                browser executable (default: /usr/bin/chromium)
//   STRUCTSPEC_E2E_ARTIFACTS  where screenshots and logs go (default: <repo>/test-artifacts)
//   STRUCTSPEC_E2E_TRACE=1  log every LSP message in the structspec log (and code-server at trace level)
//   STRUCTSPEC_E2E_KEEP=1   keep the temporary code-server directories

import { spawn, execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

export const here = path.dirname(fileURLToPath(import.meta.url));
export const clientDir = path.resolve(here, '..', '..');
export const repoRoot = path.resolve(clientDir, '..');
export const artifacts = path.resolve(process.env.STRUCTSPEC_E2E_ARTIFACTS ?? path.join(repoRoot, 'test-artifacts'));
export const vsix = path.join(clientDir, 'structspec.vsix');
export const codeServer =
  process.env.CODE_SERVER ??
  path.join(os.homedir(), '.cache', 'structspec-vscode-e2e', 'code-server', 'node_modules', '.bin', 'code-server');
export const chromiumPath = process.env.CHROMIUM ?? '/usr/bin/chromium';

export function log(message) {
  process.stdout.write(`[e2e] ${message}\n`);
}

export function fail(message) {
  throw new Error(message);
}

export function which(name) {
  for (const dir of (process.env.PATH ?? '').split(path.delimiter)) {
    const candidate = path.join(dir, name);
    try {
      fs.accessSync(candidate, fs.constants.X_OK);
      return candidate;
    } catch {
      // keep looking
    }
  }
  return undefined;
}

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

async function waitForHttp(url, timeoutMs, proc) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (proc.exitCode !== null) {
      fail(`code-server exited with ${proc.exitCode} before serving ${url}`);
    }
    try {
      const res = await fetch(url);
      if (res.status < 500) {
        return;
      }
    } catch {
      // not up yet
    }
    await new Promise((r) => setTimeout(r, 250));
  }
  fail(`code-server did not answer at ${url} within ${timeoutMs} ms`);
}

/** User settings every session starts from: quiet workbench, Tab free for ghost text. */
export const BASE_SETTINGS = {
  'security.workspace.trust.enabled': false,
  'workbench.startupEditor': 'none',
  'workbench.tips.enabled': false,
  'workbench.enableExperiments': false,
  'telemetry.telemetryLevel': 'off',
  'update.mode': 'none',
  'extensions.autoUpdate': false,
  'extensions.autoCheckUpdates': false,
  'extensions.ignoreRecommendations': true,
  'chat.commandCenter.enabled': false,
  // Keep the suggest widget out of the way: Tab must accept the ghost text.
  'editor.quickSuggestions': { other: 'off', comments: 'off', strings: 'off' },
  'editor.suggestOnTriggerCharacters': false,
  'editor.wordBasedSuggestions': 'off',
  'editor.inlineSuggest.enabled': true,
  'editor.autoClosingBrackets': 'never',
  'editor.autoClosingQuotes': 'never',
  'editor.autoIndent': 'none',
  'editor.minimap.enabled': false,
  'files.autoSave': 'off',
  ...(process.env.STRUCTSPEC_E2E_TRACE === '1' ? { 'structspec.trace.server': 'verbose' } : {}),
};

/**
 * Start code-server on a fresh profile with the .vsix installed and open
 * `files` (name -> text) as a workspace in headless Chromium.
 * `name` prefixes the artifacts (code-server log, structspec log).
 * `machineSettings` go to the Remote settings (`<user-data>/Machine/settings.json`):
 * code-server is a remote window, where machine-scoped settings such as
 * structspec.serverPath and structspec.model are read from there.
 */
export async function openSession({ name, settings, machineSettings = {}, files }) {
  fs.mkdirSync(artifacts, { recursive: true });
  if (!fs.existsSync(vsix)) fail(`${vsix} is missing: run "npm run package" first`);
  if (!fs.existsSync(codeServer)) fail(`code-server not found at ${codeServer} (set CODE_SERVER)`);
  if (!fs.existsSync(chromiumPath)) fail(`chromium not found at ${chromiumPath} (set CHROMIUM)`);

  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'structspec-vscode-e2e-'));
  const userData = path.join(tmp, 'user-data');
  const extensions = path.join(tmp, 'extensions');
  const workspace = path.join(tmp, 'workspace');
  fs.mkdirSync(path.join(userData, 'User'), { recursive: true });
  fs.mkdirSync(workspace, { recursive: true });
  for (const [file, text] of Object.entries(files)) {
    fs.writeFileSync(path.join(workspace, file), text);
  }
  const settingsFile = path.join(userData, 'User', 'settings.json');
  const writeSettings = (extra) => fs.writeFileSync(settingsFile, JSON.stringify({ ...BASE_SETTINGS, ...extra }, null, 2));
  writeSettings(settings);
  fs.mkdirSync(path.join(userData, 'Machine'), { recursive: true });
  fs.writeFileSync(path.join(userData, 'Machine', 'settings.json'), JSON.stringify(machineSettings, null, 2));
  const configFile = path.join(tmp, 'code-server.yaml');
  fs.writeFileSync(configFile, 'auth: none\ncert: false\n');
  const env = { ...process.env, XDG_CONFIG_HOME: path.join(tmp, 'config'), XDG_DATA_HOME: path.join(tmp, 'data') };

  const version = execFileSync(codeServer, ['--version'], { env, encoding: 'utf8' }).split('\n').find((l) => /^\d/.test(l)) ?? '?';
  log(`${name}: installing ${path.relative(repoRoot, vsix)} into code-server ${version}`);
  execFileSync(codeServer, ['--config', configFile, '--user-data-dir', userData, '--extensions-dir', extensions, '--install-extension', vsix], {
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const installed = fs.readdirSync(extensions).filter((d) => d.startsWith('structspec.structspec-'));
  if (installed.length !== 1) fail(`the extension did not install: ${fs.readdirSync(extensions).join(', ')}`);

  const port = await freePort();
  const csLog = fs.createWriteStream(path.join(artifacts, `${name}-code-server.log`));
  const cs = spawn(
    codeServer,
    [
      '--config', configFile,
      '--auth', 'none',
      '--bind-addr', `127.0.0.1:${port}`,
      '--disable-telemetry',
      '--disable-update-check',
      '--disable-workspace-trust',
      ...(process.env.STRUCTSPEC_E2E_TRACE === '1' ? ['--log', 'trace'] : []),
      '--user-data-dir', userData,
      '--extensions-dir', extensions,
      workspace,
    ],
    { env, stdio: ['ignore', 'pipe', 'pipe'], detached: true },
  );
  cs.stdout.pipe(csLog);
  cs.stderr.pipe(csLog);

  let browser;
  const close = async () => {
    await browser?.close().catch(() => undefined);
    try {
      process.kill(-cs.pid, 'SIGTERM');
    } catch {
      // already gone
    }
    // Keep the structspec output channel (the extension's log) as an artifact.
    try {
      const logs = path.join(userData, 'logs');
      for (const f of fs.readdirSync(logs, { recursive: true })) {
        if (String(f).endsWith(path.join('structspec.structspec', 'structspec.log'))) {
          fs.copyFileSync(path.join(logs, String(f)), path.join(artifacts, `${name}-structspec.log`));
        }
      }
    } catch {
      // no logs
    }
    if (process.env.STRUCTSPEC_E2E_KEEP !== '1') {
      fs.rmSync(tmp, { recursive: true, force: true });
    } else {
      log(`kept ${tmp}`);
    }
  };
  try {
    await waitForHttp(`http://127.0.0.1:${port}/healthz`, 60_000, cs);
    browser = await chromium.launch({
      executablePath: chromiumPath,
      headless: true,
      args: [
        '--no-sandbox',
        '--disable-gpu',
        '--disable-quic',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
      ],
    });
    const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
    const page = await context.newPage();
    page.on('pageerror', (err) => log(`page error: ${err.message}`));
    await page.goto(`http://127.0.0.1:${port}/?folder=${encodeURIComponent(workspace)}`);
    await page.waitForSelector('.monaco-workbench', { timeout: 60_000 });
    // Folder trust: disabled above, but answer the dialog if a build shows it anyway.
    const trust = page.getByRole('button', { name: /Yes, I trust the authors/i });
    if (await trust.isVisible({ timeout: 3000 }).catch(() => false)) {
      log('answering the workspace trust dialog');
      await trust.click();
    }
    log(`${name}: code-server ${version} on port ${port}`);
    return { page, tmp, userData, workspace, writeSettings, close };
  } catch (err) {
    await close();
    throw err;
  }
}

/** The structspec status bar item: its text and codicon names. */
export async function statusBarText(page) {
  return page.evaluate(() => {
    const items = [...document.querySelectorAll('.statusbar-item')];
    const item = items.find((el) => (el.textContent ?? '').includes('structspec') || (el.getAttribute('aria-label') ?? '').includes('structspec'));
    if (!item) return undefined;
    const icons = [...item.querySelectorAll('.codicon')].map((el) => [...el.classList].find((c) => c.startsWith('codicon-') && c !== 'codicon-modifier-spin') ?? '');
    return { text: (item.textContent ?? '').trim(), icons };
  });
}

/** Wait until the structspec status bar item shows `icon` (e.g. `codicon-sparkle`). */
export async function waitForStatusIcon(page, icon, timeoutMs) {
  await page.waitForFunction(
    (cls) => [...document.querySelectorAll('.statusbar-item')].some((el) => (el.textContent ?? '').includes('structspec') && el.querySelector(`.${cls}`)),
    icon,
    { timeout: timeoutMs },
  );
}

/** Open a workspace file with Quick Open and wait for `marker` in the editor. */
export async function openFile(page, file, marker) {
  await page.locator('.monaco-workbench').click({ position: { x: 640, y: 300 } });
  await page.keyboard.press('Control+P');
  await page.waitForSelector('.quick-input-widget input', { state: 'visible', timeout: 15_000 });
  await page.keyboard.type(file);
  await pickExactly(page, file);
  await page.waitForSelector('.monaco-editor.focused .view-lines', { timeout: 30_000 });
  // Monaco renders spaces as U+00A0.
  await page.waitForFunction((m) => (document.querySelector('.monaco-editor.focused .view-lines')?.textContent ?? '').replace(/\u00a0/g, ' ').includes(m), marker, {
    timeout: 30_000,
  });
}

/** Run a command from the command palette by its title. */
export async function runCommand(page, title) {
  await page.keyboard.press('F1');
  await page.waitForSelector('.quick-input-widget input', { state: 'visible', timeout: 15_000 });
  await page.keyboard.type(title);
  await pickExactly(page, title);
  await page.waitForSelector('.quick-input-widget', { state: 'hidden', timeout: 15_000 });
}

/** Pick the quick-pick row labelled `label` (the list fuzzy-filters as you type, so not simply the first). */
async function pickExactly(page, label) {
  const row = await page.waitForFunction(
    (want) => {
      const rows = [...document.querySelectorAll('.quick-input-list .monaco-list-row')];
      const w = want.toLowerCase();
      // Exactly the label, or the label plus a parenthesised remote name.
      return (
        rows.find((r) => {
          const text = (r.querySelector('.label-name')?.textContent ?? '').trim().toLowerCase();
          return text === w || text.startsWith(`${w} (`);
        }) ?? false
      );
    },
    label,
    { timeout: 15_000 },
  );
  // Keyboard, not a click: Enter on the picked row leaves focus where VS Code puts it.
  const index = Number(await row.evaluate((r) => r.getAttribute('data-index') ?? '0'));
  for (let i = 0; i < index; i++) {
    await page.keyboard.press('ArrowDown');
  }
  await page.keyboard.press('Enter');
}

/**
 * Replace the Remote (machine) settings the way a user does: open them in the
 * editor, replace the text, save. (code-server does not notice the file
 * changing on disk behind its back.)
 */
export async function editMachineSettings(page, values) {
  await runCommand(page, 'Preferences: Open Remote Settings (JSON)');
  await page.waitForFunction(() => document.querySelector('.tab.active')?.textContent?.includes('settings.json'), undefined, { timeout: 15_000 });
  await page.waitForSelector('.monaco-editor.focused', { timeout: 15_000 });
  await page.keyboard.press('Control+A');
  await page.keyboard.press('Delete');
  await page.keyboard.insertText(JSON.stringify(values, null, 2));
  await page.keyboard.press('Control+S');
  await page.waitForSelector('.tab.active.dirty', { state: 'detached', timeout: 15_000 });
  await runCommand(page, 'View: Close Editor');
}

/** Notification toasts and the notification center: message and button labels. */
export async function notifications(page) {
  return page.evaluate(() =>
    [...document.querySelectorAll('.notifications-toasts .notification-list-item, .notifications-center .notification-list-item')].map((el) => ({
      message: (el.querySelector('.notification-list-item-message')?.textContent ?? '').trim(),
      buttons: [...el.querySelectorAll('.notification-list-item-buttons-container .monaco-button')].map((b) => (b.textContent ?? '').trim()),
    })),
  );
}

/** Run `main`, print PASS/FAIL, exit 0/1. */
export function runMain(main) {
  main().then(
    () => {
      log('PASS');
      process.exit(0);
    },
    (err) => {
      process.stderr.write(`[e2e] FAIL: ${err instanceof Error ? err.message : String(err)}\n`);
      process.exit(1);
    },
  );
}

// End-to-end test of the client's failure handling and commands in code-server:
//
//   1. server executable not found: one notification with "Open Setting",
//      whose button opens the settings editor at structspec.serverPath;
//   2. a server that crashes at once: restarted a bounded number of times,
//      then one notification, and no more starts (no loop);
//   3. a model file that does not exist: one notification for structspec.model;
//   4. fixing the settings recovers without a reload (stand-in model);
//   5. "Toggle Completions" stops and starts the server; "Restart Server" works;
//   6. a setting that needs no new process (maxTokens) is sent as configuration,
//      without a restart; "Show Log" shows the log.
//
// Every step edits the Remote settings (settings.json in the editor) while the
// extension runs, so the settings-change paths (restart on serverPath/model)
// are exercised too.
// Uses the stand-in model (fast); the completion test (e2e.mjs) uses the real one.

import * as fs from 'node:fs';
import * as path from 'node:path';
import {
  artifacts,
  editMachineSettings,
  fail,
  log,
  notifications,
  openFile,
  openSession,
  runCommand,
  runMain,
  statusBarText,
  waitForStatusIcon,
  which,
} from './harness.mjs';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function waitForNotice(page, pattern, timeoutMs = 30_000) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const found = (await notifications(page)).filter((n) => pattern.test(n.message));
    if (found.length > 0) return found;
    await sleep(200);
  }
  fail(`no notification matching ${pattern} within ${timeoutMs} ms; have ${JSON.stringify(await notifications(page))}`);
}

async function countNotices(page, pattern) {
  return (await notifications(page)).filter((n) => pattern.test(n.message)).length;
}

async function clearNotifications(page) {
  await runCommand(page, 'Notifications: Clear All Notifications');
  await page.waitForFunction(() => document.querySelectorAll('.notifications-toasts .notification-list-item').length === 0, undefined, {
    timeout: 10_000,
  });
}

async function main() {
  const server = process.env.STRUCTSPEC_E2E_SERVER ?? which('structspec-lsp');
  if (!server) fail('structspec-lsp is not on PATH (set STRUCTSPEC_E2E_SERVER)');
  const session = await openSession({
    name: 'vscode-failures',
    settings: {},
    machineSettings: { 'structspec.serverPath': '/nonexistent/bin/structspec-lsp' },
    files: { 'hello.py': 'def hello(name):\n    return "hello " + name\n' },
  });
  const { page, tmp } = session;
  try {
    // 1. Not found.
    const notFound = /cannot find the language server/;
    const [notice] = await waitForNotice(page, notFound);
    log(`not found: ${JSON.stringify(notice)}`);
    if (!notice.buttons.includes('Open Setting')) fail(`no "Open Setting" button: ${JSON.stringify(notice)}`);
    await waitForStatusIcon(page, 'codicon-error', 10_000);
    await page.screenshot({ path: path.join(artifacts, 'vscode-failure-not-found.png') });
    await sleep(3000);
    if ((await countNotices(page, notFound)) !== 1) fail('the not-found notification was shown more than once');
    await page.locator('.notifications-toasts .monaco-button', { hasText: 'Open Setting' }).first().click();
    await page.waitForFunction(
      () => [...document.querySelectorAll('.settings-editor .setting-item-contents')].some((el) => (el.textContent ?? '').includes('Server Path')),
      undefined,
      { timeout: 20_000 },
    );
    log('"Open Setting" opened the settings editor at structspec.serverPath');
    await runCommand(page, 'View: Close Editor');

    // 2. Crash at start: bounded restarts, one notification.
    const starts = path.join(tmp, 'crash-starts.txt');
    const crasher = path.join(tmp, 'crashing-structspec-lsp');
    fs.writeFileSync(crasher, `#!/bin/sh\necho start >> '${starts}'\necho "Traceback: simulated crash" >&2\nexit 3\n`, { mode: 0o755 });
    await clearNotifications(page);
    await editMachineSettings(page, { 'structspec.serverPath': crasher });
    const crashed = /will not be restarted/;
    const [crashNotice] = await waitForNotice(page, crashed, 60_000);
    log(`crash: ${JSON.stringify(crashNotice)}`);
    await sleep(5000);
    const runs = fs.readFileSync(starts, 'utf8').trim().split('\n').length;
    if (runs < 2 || runs > 5) fail(`the crashing server was started ${runs} times (expected a few restarts, then none)`);
    if ((await countNotices(page, crashed)) !== 1) fail('the crash notification was shown more than once');
    if ((await countNotices(page, /./)) !== 1) fail(`other notifications appeared: ${JSON.stringify(await notifications(page))}`);
    log(`crashing server started ${runs} times, then left stopped`);

    // 3. Model file missing.
    await clearNotifications(page);
    await editMachineSettings(page, { 'structspec.serverPath': server, 'structspec.model': '/nonexistent/model.gguf' });
    const [modelNotice] = await waitForNotice(page, /cannot load the model/);
    log(`model missing: ${JSON.stringify(modelNotice)}`);
    if (!modelNotice.buttons.includes('Open Setting')) fail('no "Open Setting" button on the model notice');
    await page.screenshot({ path: path.join(artifacts, 'vscode-failure-model.png') });

    // 4. Fixing the settings recovers, no reload.
    await clearNotifications(page);
    await editMachineSettings(page, { 'structspec.serverPath': server, 'structspec.model': 'standin' });
    await waitForStatusIcon(page, 'codicon-sparkle', 120_000);
    log(`recovered: ${JSON.stringify(await statusBarText(page))}`);
    await openFile(page, 'hello.py', 'def hello');
    log('opened hello.py');

    // 5. Commands.
    await runCommand(page, 'structspec: Toggle Completions');
    await waitForStatusIcon(page, 'codicon-circle-slash', 30_000);
    const settingsText = fs.readFileSync(path.join(session.userData, 'User', 'settings.json'), 'utf8');
    if (!/"structspec\.enable":\s*false/.test(settingsText)) fail('toggle did not write structspec.enable: false');
    log('toggled off');
    await runCommand(page, 'structspec: Toggle Completions');
    await waitForStatusIcon(page, 'codicon-sparkle', 60_000);
    log('toggled on');
    await runCommand(page, 'structspec: Restart Server');
    await waitForStatusIcon(page, 'codicon-sparkle', 60_000);
    log('restarted');
    // 6. A setting that needs no new process is sent as configuration.
    const logText = () => {
      const logs = path.join(session.userData, 'logs');
      const f = fs.readdirSync(logs, { recursive: true }).map(String).find((x) => x.endsWith(path.join('structspec.structspec', 'structspec.log')));
      return f ? fs.readFileSync(path.join(logs, f), 'utf8') : '';
    };
    await editMachineSettings(page, { 'structspec.serverPath': server, 'structspec.model': 'standin', 'structspec.maxTokens': 16 });
    const deadline = Date.now() + 15_000;
    while (!/Settings changed: configure/.test(logText()) && Date.now() < deadline) await sleep(200);
    if (!/Settings changed: configure/.test(logText())) fail('changing structspec.maxTokens did not send the configuration');
    await sleep(2000);
    const afterChange = logText().split('Settings changed: configure').pop() ?? '';
    if (/Starting |stopped|exited/.test(afterChange)) fail(`changing structspec.maxTokens restarted the server: ${afterChange}`);
    await waitForStatusIcon(page, 'codicon-sparkle', 10_000);
    log('structspec.maxTokens went to the running server as configuration (no restart)');

    await runCommand(page, 'structspec: Show Log');
    await page.waitForFunction(() => (document.querySelector('.panel .monaco-editor .view-lines')?.textContent ?? '').includes('Starting'), undefined, {
      timeout: 20_000,
    });
    log('the log shows the server starts');
    if ((await countNotices(page, /./)) !== 0) fail(`unexpected notifications: ${JSON.stringify(await notifications(page))}`);
  } catch (err) {
    await page.screenshot({ path: path.join(artifacts, 'vscode-failures-failure.png') }).catch(() => undefined);
    throw err;
  } finally {
    await session.close();
  }
}

runMain(main);

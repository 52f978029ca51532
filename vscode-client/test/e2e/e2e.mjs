// End-to-end test of the VS Code client in a real VS Code: code-server in
// headless Chromium, driven by playwright-core.
//
// It installs the built .vsix into a fresh code-server, opens a Python file in
// a workspace, types, waits for the ghost text that structspec-lsp suggests,
// measures the time from the last keystroke to the frame where the ghost text
// is visible, takes a screenshot of the editor with the suggestion and the
// status bar, accepts with Tab, saves, and checks the file's text on disk.
//
// Environment (all optional):
//   STRUCTSPEC_E2E_SERVER   structspec-lsp executable (default: found on PATH)
//   STRUCTSPEC_E2E_MODEL    structspec.model setting (default: unset = the default model)
//   STRUCTSPEC_E2E_TRIALS   measured completions (default 5)
//   and those of harness.mjs (CODE_SERVER, CHROMIUM, STRUCTSPEC_E2E_ARTIFACTS, ...)
//
// Exit status 0 when every check passed; the measurements are printed as
// `keystroke-to-ghost-text ...` lines and written to vscode-e2e.json.

import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import {
  artifacts,
  fail,
  log,
  openFile,
  openSession,
  repoRoot,
  runCommand,
  runMain,
  statusBarText,
  waitForStatusIcon,
  which,
} from './harness.mjs';

const trials = Math.max(1, Number(process.env.STRUCTSPEC_E2E_TRIALS ?? 5));
const FIRST_TIMEOUT_MS = 180_000; // the first completion loads the model
const GHOST_TIMEOUT_MS = 30_000;

/** The file the test types into, and the functions it writes, one per trial. */
const INITIAL = `import math


def area_of_circle(radius):
    """Return the area of a circle with the given radius."""
    return math.pi * radius ** 2
`;

const STUBS = [
  ['diameter_of_circle', 'diameter of a circle'],
  ['circumference_of_circle', 'circumference of a circle'],
  ['area_of_square', 'area of a square with the given side'],
  ['perimeter_of_square', 'perimeter of a square with the given side'],
  ['volume_of_sphere', 'volume of a sphere'],
  ['surface_of_sphere', 'surface area of a sphere'],
  ['volume_of_cube', 'volume of a cube with the given side'],
  ['area_of_rectangle', 'area of a rectangle'],
];

function stubText(i) {
  const [name, what] = STUBS[i % STUBS.length];
  const arg = name.includes('square') || name.includes('cube') ? 'side' : name.includes('rectangle') ? 'width, height' : 'radius';
  const suffix = i >= STUBS.length ? `_${Math.floor(i / STUBS.length)}` : '';
  return `\n\ndef ${name}${suffix}(${arg}):\n    """Return the ${what}."""\n    return`;
}

/** Runs in the page: timestamps keystrokes and the first painted frame with ghost text. */
function installProbe() {
  const probe = { lastKey: 0, ghostAt: 0, pending: false, text: '' };
  window.__structspecProbe = probe;
  const ghostText = () => {
    const parts = [];
    for (const el of document.querySelectorAll('.monaco-editor .ghost-text-decoration, .monaco-editor .ghost-text-decoration-preview, .monaco-editor .ghost-text')) {
      parts.push(el.textContent ?? '');
    }
    return parts.join('').replace(/\u00a0/g, ' ');
  };
  const check = () => {
    const text = ghostText();
    if (text.trim() === '') {
      probe.text = '';
      return;
    }
    if (probe.lastKey > 0 && probe.ghostAt === 0 && !probe.pending) {
      probe.pending = true;
      // Visible means painted: stamp the next animation frame.
      requestAnimationFrame(() => {
        probe.pending = false;
        if (probe.ghostAt === 0 && ghostText().trim() !== '') {
          probe.ghostAt = performance.now();
          probe.text = ghostText();
        }
      });
    }
  };
  document.addEventListener(
    'keydown',
    () => {
      probe.lastKey = performance.now();
      probe.ghostAt = 0;
    },
    true,
  );
  new MutationObserver(check).observe(document.body, { subtree: true, childList: true, characterData: true, attributes: true, attributeFilter: ['class'] });
}

/** The ghost text as rendered: first line inline, further lines in view zones. */
async function renderedGhost(page) {
  return page.evaluate(() => {
    const editor = document.querySelector('.monaco-editor.focused') ?? document.querySelector('.monaco-editor');
    if (!editor) return { inline: '', lines: [] };
    const inline = [...editor.querySelectorAll('.ghost-text-decoration, .ghost-text-decoration-preview')]
      .map((el) => el.textContent ?? '')
      .join('');
    const lines = [...editor.querySelectorAll('.ghost-text .view-line')].map((el) => el.textContent ?? '');
    return { inline: inline.replace(/\u00a0/g, ' '), lines: lines.map((l) => l.replace(/\u00a0/g, ' ')) };
  });
}

async function waitForProbe(page, timeoutMs) {
  const handle = await page.waitForFunction(
    () => {
      const p = window.__structspecProbe;
      return p && p.ghostAt > 0 ? { latency: p.ghostAt - p.lastKey, text: p.text } : false;
    },
    undefined,
    { timeout: timeoutMs, polling: 20 },
  );
  return handle.jsonValue();
}

async function clearGhost(page) {
  await page.keyboard.press('Escape');
  await page.waitForFunction(() => document.querySelectorAll('.monaco-editor .ghost-text-decoration, .monaco-editor .ghost-text').length === 0, undefined, {
    timeout: 5000,
  });
}

/** Type a stub: everything but the last character as one input, then the last key. */
async function typeStub(page, text) {
  await page.keyboard.press('Control+End');
  await page.keyboard.insertText(text.slice(0, -1));
  await page.waitForTimeout(300);
  await clearGhost(page).catch(() => undefined);
  await page.keyboard.type(text.slice(-1));
}

/**
 * Hover the status bar item and read its tooltip's "Last latency: N ms" (the
 * server's time for the last completion it finished, which after a Tab may be
 * a later request than the suggestion on screen); the tooltip then shows in
 * the screenshot.
 */
async function statusBarLatency(page) {
  try {
    await page.locator('.statusbar-item', { hasText: 'structspec' }).first().hover();
    const hover = page.locator('.monaco-hover, .workbench-hover').filter({ hasText: 'Last latency' }).first();
    await hover.waitFor({ timeout: 5000 });
    const m = /Last latency: (\d+) ms/.exec((await hover.textContent()) ?? '');
    return m ? Number(m[1]) : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Save the editor (Ctrl+S) and read the file once it differs from `previous`
 * and has stopped changing. The save truncates the file before writing it, so
 * a read in between sees an empty or partial file: a text counts only when two
 * reads 200 ms apart agree.
 */
async function saveAndRead(page, file, previous) {
  await page.keyboard.press('Control+S');
  await page.waitForSelector('.tab.active.dirty', { state: 'detached', timeout: 10_000 }).catch(() => undefined);
  const deadline = Date.now() + 10_000;
  let text = fs.readFileSync(file, 'utf8');
  for (;;) {
    await new Promise((r) => setTimeout(r, 200));
    const again = fs.readFileSync(file, 'utf8');
    const settled = again === text && again !== previous;
    text = again;
    if (settled || Date.now() >= deadline) return text;
  }
}

/** Drop unsaved edits (File: Revert File) and wait until the editor shows `saved` again. */
async function revertFile(page, file, saved) {
  await clearGhost(page).catch(() => undefined);
  await runCommand(page, 'File: Revert File');
  await page.waitForSelector('.tab.active.dirty', { state: 'detached', timeout: 15_000 }).catch(() => undefined);
  if (fs.readFileSync(file, 'utf8') !== saved) fail('the file on disk changed while reverting');
  await page.locator('.monaco-editor .view-lines').first().click();
}

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

async function main() {
  const server = process.env.STRUCTSPEC_E2E_SERVER ?? which('structspec-lsp');
  if (!server) fail('structspec-lsp is not on PATH (set STRUCTSPEC_E2E_SERVER)');
  const model = process.env.STRUCTSPEC_E2E_MODEL;
  const session = await openSession({
    name: 'vscode',
    settings: {},
    machineSettings: { 'structspec.serverPath': server, ...(model ? { 'structspec.model': model } : {}) },
    files: { 'circles.py': INITIAL },
  });
  const { page, workspace } = session;
  const file = path.join(workspace, 'circles.py');
  const results = { server, model: model ?? '(default)', trials: [] };
  log(`server ${server}${model ? ` --model ${model}` : ' (default model)'}`);
  try {
    await page.evaluate(installProbe);
    // Type only once the server is up: the inline provider is registered after initialize.
    await waitForStatusIcon(page, 'codicon-sparkle', FIRST_TIMEOUT_MS);
    log(`status bar: ${JSON.stringify(await statusBarText(page))}`);
    await openFile(page, 'circles.py', 'area_of_circle');

    // Each trial types a new function stub into the saved file, waits for the
    // ghost text, accepts it with Tab, saves, and checks the file on disk is
    // exactly the text before + the stub + the suggestion. Accepting keeps the
    // file realistic for the next trial (a file of bare `return` stubs would
    // teach the model to suggest nothing). A trial without a suggestion (the
    // model may find nothing to add within its latency budget) is a miss: the
    // file is reverted and the run goes on.
    let saved = INITIAL;
    let hits = 0;
    let screenshotTaken = false;
    const attempts = trials + 1; // trial 0 is the warm-up: it may load the model
    for (let i = 0; i < attempts + 3 && (i < attempts || hits === 0); i++) {
      const warmUp = i === 0;
      const stub = stubText(i);
      // Start each trial with the server idle, as after a pause: accepting the
      // previous suggestion makes VS Code ask for the next one at once.
      await waitForStatusIcon(page, 'codicon-sparkle', 60_000).catch(() => log(`${i}: the server is still busy after 60 s`));
      const t0 = Date.now();
      await typeStub(page, stub);
      const r = await waitForProbe(page, warmUp ? FIRST_TIMEOUT_MS : GHOST_TIMEOUT_MS).catch(() => undefined);
      const label = warmUp ? 'warm-up' : i < attempts ? `trial ${i}` : `extra try ${i - attempts + 1}`;
      if (warmUp) results.firstMs = Date.now() - t0;
      if (r === undefined) {
        if (!warmUp) results.misses = (results.misses ?? 0) + 1;
        log(`${label}: no ghost text within ${warmUp ? FIRST_TIMEOUT_MS : GHOST_TIMEOUT_MS} ms; reverting the stub`);
        await revertFile(page, file, saved);
        continue;
      }
      if (warmUp) {
        log(`warm-up: first ghost text ${results.firstMs} ms after typing began: ${JSON.stringify(r.text)}`);
      } else {
        await page.waitForTimeout(300); // let the status bar catch the server's status
        const statusMs = await statusBarLatency(page);
        if (statusMs === undefined) fail(`${label}: the status bar tooltip shows no "Last latency"`);
        results.trials.push({ latencyMs: Math.round(r.latency), statusBarLastLatencyMs: statusMs, ghost: r.text });
        log(`${label}: keystroke-to-ghost-text ${r.latency.toFixed(0)} ms (status bar: last latency ${statusMs} ms): ${JSON.stringify(r.text)}`);
      }
      hits += 1;
      await page.waitForTimeout(300); // let the status bar catch the server's idle status
      const ghost = await renderedGhost(page);
      if (ghost.inline.trim() === '' && ghost.lines.length === 0) fail(`${label}: the ghost text disappeared before Tab`);
      if (!warmUp && i >= Math.min(trials, attempts - 1)) {
        const shot = path.join(artifacts, 'vscode-ghost-text.png');
        await page.screenshot({ path: shot });
        results.statusBar = await statusBarText(page);
        screenshotTaken = true;
        log(`screenshot: ${path.relative(repoRoot, shot)}; status bar ${JSON.stringify(results.statusBar)}`);
      }
      await page.mouse.move(700, 400); // drop the status bar tooltip
      await page.keyboard.press('Tab');
      await page.waitForFunction(() => document.querySelectorAll('.monaco-editor.focused .ghost-text-decoration').length === 0, undefined, { timeout: 5000 });
      const expected = saved + stub + ghost.inline + ghost.lines.map((l) => `\n${l}`).join('');
      const after = await saveAndRead(page, file, saved);
      if (after !== expected) {
        fail(`${label}: after Tab the file is not the text before + the stub + the suggestion.\nexpected tail: ${JSON.stringify(expected.slice(-300))}\nfile tail:     ${JSON.stringify(after.slice(-300))}`);
      }
      saved = after;
      results.accepted = (results.accepted ?? 0) + 1;
      log(`${label}: accepted with Tab; the file now ends with ${JSON.stringify(after.slice(-80))}`);
    }
    if (results.trials.length === 0) fail(`no ghost text in ${trials} trials`);
    if (!screenshotTaken) {
      // The last trials missed: the screenshot shows the last accepted text instead.
      await page.screenshot({ path: path.join(artifacts, 'vscode-ghost-text.png') });
    }

    const status = await statusBarText(page);
    log(`status bar: ${JSON.stringify(status)}`);
    if (!status || !status.text.includes('structspec')) fail('no structspec status bar item');
    if (status.icons.includes('codicon-error')) fail(`the status bar shows an error: ${status.text}`);
    if (!/\d+ tok\/s/.test(status.text)) fail(`the status bar shows no tokens/s: ${status.text}`);
    // Tab ran each item's structspec.accept command: the server counted it and
    // the status bar's acceptance is above zero.
    await page
      .waitForFunction(
        () => [...document.querySelectorAll('.statusbar-item')].some((el) => /structspec.*\b[1-9]\d*%/.test(el.textContent ?? '')),
        undefined,
        { timeout: 10_000 },
      )
      .catch(async () => fail(`the acceptance was not counted: status bar ${JSON.stringify(await statusBarText(page))}`));
    results.statusBarAfterAccept = await statusBarText(page);
    log(`status bar after accepting: ${JSON.stringify(results.statusBarAfterAccept)}`);

    const latencies = results.trials.map((t) => t.latencyMs);
    results.medianMs = median(latencies);
    results.maxMs = Math.max(...latencies);
    results.loadAverage = os.loadavg().map((x) => Number(x.toFixed(2)));
    log(
      `keystroke-to-ghost-text median ${results.medianMs} ms, max ${results.maxMs} ms over ${latencies.length} trials ` +
        `(${latencies.join(', ')} ms; ${results.misses ?? 0} without a suggestion); first completion ${results.firstMs} ms; ` +
        `load average ${results.loadAverage.join(' ')} on ${os.cpus().length} CPUs`,
    );
    fs.writeFileSync(path.join(artifacts, 'vscode-e2e.json'), JSON.stringify(results, null, 2));
    await page.screenshot({ path: path.join(artifacts, 'vscode-after-accept.png') });
  } catch (err) {
    await page.screenshot({ path: path.join(artifacts, 'vscode-failure.png') }).catch(() => undefined);
    throw err;
  } finally {
    await session.close();
  }
}

runMain(main);

/**
 * The controller (src/extension.ts) over a fake `vscode` and a fake server
 * process: lifecycle defects a user meets (stop/restart during a start,
 * deactivation).
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { afterEach, describe, test } from 'node:test';
import { changeSettings, deactivateLikeVsCode, installFakeVscode, state } from './support/fakeVscode';

installFakeVscode();

/*
 * vscode-languageclient 10.1.2 itself leaves two promises unhandled whenever a
 * start fails (the original client too: a server that exits at start does it):
 * its private `_onStart` promise and the `stop()` its doInitialize calls. Mark
 * them handled, so that the test runner blames only the extension's own.
 */
{
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const lc = require('vscode-languageclient/node') as Record<string, { prototype: Record<string, (...a: unknown[]) => unknown> }>;
  const base = Object.getPrototypeOf(lc.LanguageClient!.prototype) as Record<string, (...a: unknown[]) => unknown>;
  const onStart = base.createOnStartPromise!;
  base.createOnStartPromise = function (this: unknown) {
    const r = onStart.call(this) as [Promise<void>, unknown, unknown];
    r[0].catch(() => undefined);
    return r;
  };
  const shutdown = lc.LanguageClient!.prototype.shutdown!;
  lc.LanguageClient!.prototype.shutdown = function (this: unknown, ...a: unknown[]) {
    const p = shutdown.apply(this, a) as Promise<void>;
    p.catch(() => undefined);
    return p;
  };
}

/** Unhandled rejections and exceptions (the extension host logs them as errors). */
const unhandled: unknown[] = [];
process.on('unhandledRejection', (e) => unhandled.push(e));
process.on('uncaughtException', (e) => unhandled.push(e));

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'structspec-ctl-'));
const wrapper = path.join(tmp, 'structspec-lsp');
fs.writeFileSync(wrapper, `#!/bin/sh\nexec "${process.execPath}" "${path.join(__dirname, 'support', 'fakeServer.js')}" "$@"\n`, { mode: 0o755 });

type Ext = { activate(c: unknown): void; deactivate(): Promise<void> };
function loadExtension(): Ext {
  const file = require.resolve('../../src/extension');
  delete require.cache[file];
  return require(file) as Ext;
}

function starts(log: string): number[] {
  if (!fs.existsSync(log)) return [];
  return fs
    .readFileSync(log, 'utf8')
    .split('\n')
    .filter((l) => l.startsWith('start '))
    .map((l) => Number(l.slice(6)));
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

async function until(what: string, cond: () => boolean, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) assert.fail(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

let n = 0;
function session(mode: string, settings: Record<string, unknown> = {}) {
  const log = path.join(tmp, `server-${++n}.log`);
  process.env.FAKE_MODE = mode;
  process.env.FAKE_LOG = log;
  state.settings = { serverPath: wrapper, ...settings };
  state.log = [];
  state.errors = [];
  state.closedChannelUses = 0;
  unhandled.length = 0;
  const ext = loadExtension();
  const context = { subscriptions: [] as { dispose(): unknown }[] };
  ext.activate(context);
  return { ext, context, log };
}

const pids: number[] = [];
afterEach(() => {
  for (const pid of pids.splice(0)) if (alive(pid)) process.kill(pid, 'SIGKILL');
});

describe('controller lifecycle', () => {
  test('turning completions off stops a server that hangs before answering initialize', async () => {
    const { ext, context, log } = session('hang');
    await until('the server start', () => starts(log).length === 1);
    const [pid] = starts(log);
    pids.push(pid!);
    changeSettings({ serverPath: wrapper, enable: false });
    await until('the hung server to be stopped', () => !alive(pid!), 8000);
    await Promise.race([deactivateLikeVsCode(ext, context), sleep(8000)]);
  });

  test('deactivation ends a server that hangs before answering initialize', async () => {
    const { ext, context, log } = session('hang');
    await until('the server start', () => starts(log).length === 1);
    const [pid] = starts(log);
    pids.push(pid!);
    const done = await Promise.race([deactivateLikeVsCode(ext, context).then(() => 'done'), sleep(8000).then(() => 'pending')]);
    assert.equal(done, 'done', 'deactivate() never finished');
    assert.equal(alive(pid!), false, 'the server outlived the extension');
  });

  test('no server is started after deactivation (pending crash restart)', async () => {
    const { ext, context, log } = session('crash');
    await until('a crash and a scheduled restart', () => state.log.some((l) => /restarting it \(1\//.test(l)));
    const before = starts(log).length;
    await Promise.race([deactivateLikeVsCode(ext, context), sleep(8000)]);
    await sleep(2500); // past the 500 ms * n restart delay
    for (const pid of starts(log)) pids.push(pid);
    assert.equal(starts(log).length, before, 'a new server was spawned after deactivate()');
    assert.deepEqual(unhandled.map(String), []);
  });

  test('the completion menu never asks the server: the suggestion is the ghost text', async () => {
    state.completionProviders = [];
    const { ext, context, log } = session('ok');
    await until('initialized', () => fs.existsSync(log) && fs.readFileSync(log, 'utf8').includes('"initialized"'));
    pids.push(...starts(log));
    await until('a completion provider', () => state.completionProviders.length > 0);
    const document = { uri: { toString: () => 'file:///a.py' }, languageId: 'python', version: 1 };
    const token = { isCancellationRequested: false, onCancellationRequested: () => ({ dispose() {} }) };
    const items = await state.completionProviders[0]!.provideCompletionItems(
      document,
      { line: 0, character: 1 },
      { triggerKind: 0 },
      token,
    );
    assert.equal(items, undefined);
    await sleep(200);
    assert.ok(!fs.readFileSync(log, 'utf8').includes('textDocument/completion'));
    await Promise.race([deactivateLikeVsCode(ext, context), sleep(8000)]);
  });

  test('deactivation stops a running server without using the disposed log', async () => {
    const { ext, context, log } = session('ok');
    await until('initialized', () => fs.existsSync(log) && fs.readFileSync(log, 'utf8').includes('"initialized"'));
    const [pid] = starts(log);
    pids.push(pid!);
    await Promise.race([deactivateLikeVsCode(ext, context), sleep(8000)]);
    await until('the server to exit', () => !alive(pid!), 8000);
    await sleep(200);
    assert.equal(state.closedChannelUses, 0, 'the log was written after VS Code disposed it');
    assert.deepEqual(unhandled.map(String), []);
  });
});

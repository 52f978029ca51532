/** Unit tests of the failure policy: one notice per kind, bounded restarts. */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { crashNotice, modelFailureLine, modelMissingNotice, notFoundNotice, NoticeGate, RestartBudget, TailBuffer } from '../../src/failures';

describe('notices', () => {
  test('not found names the setting that fixes it', () => {
    const n = notFoundNotice({ command: 'structspec-lsp', args: [], origin: 'PATH' });
    assert.equal(n.setting, 'structspec.serverPath');
    assert.match(n.message, /"structspec-lsp" on PATH/);
    assert.equal(notFoundNotice({ command: '/py', args: [], origin: 'pythonPath' }).setting, 'structspec.pythonPath');
  });
  test('model missing points at structspec.model', () => {
    const n = modelMissingNotice('/nope.gguf');
    assert.equal(n.setting, 'structspec.model');
    assert.match(n.message, /\/nope\.gguf.*does not exist/);
  });
  test('crash quotes the last line of stderr', () => {
    assert.match(crashNotice(4, 'a\nTraceback\nValueError: boom\n').message, /stopped 4 times.*ValueError: boom/);
  });
});

describe('modelFailureLine', () => {
  test('recognises model load failures', () => {
    assert.equal(modelFailureLine('loading\nerror: model file /x.gguf does not exist\n'), 'error: model file /x.gguf does not exist');
    assert.ok(modelFailureLine('FileNotFoundError: No such file or directory: /m/a.gguf'));
    assert.ok(modelFailureLine('structspec: cannot load model foo: not a GGUF file'));
  });
  test('ignores other crashes', () => {
    assert.equal(modelFailureLine('Traceback\nKeyError: 3'), undefined);
    assert.equal(modelFailureLine(''), undefined);
  });
});

describe('NoticeGate', () => {
  test('one notice per kind until reset', () => {
    const g = new NoticeGate();
    assert.equal(g.admit('crash'), true);
    assert.equal(g.admit('crash'), false);
    assert.equal(g.admit('not-found'), true);
    g.reset();
    assert.equal(g.admit('crash'), true);
  });
});

describe('RestartBudget', () => {
  test('at most N restarts in the window, then none', () => {
    const b = new RestartBudget(3, 1000);
    assert.equal(b.crashed(0), true);
    assert.equal(b.crashed(10), true);
    assert.equal(b.crashed(20), true);
    assert.equal(b.crashed(30), false);
    assert.equal(b.crashed(40), false);
    // Old crashes age out of the window.
    assert.equal(b.crashed(5000), true);
    b.reset();
    assert.equal(b.count, 0);
  });
});

describe('TailBuffer', () => {
  test('keeps the last characters', () => {
    const t = new TailBuffer(5);
    t.push('abc');
    t.push('defg');
    assert.equal(t.value, 'cdefg');
    t.clear();
    assert.equal(t.value, '');
  });
});

/** Unit tests of which cursor moves are reported for pre-warm. */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { CURSOR_REST_MS, CursorPlace, cursorParams, CursorReporter, declareCursorReport, EDIT_SHADOW_MS, reportsCursorIn } from '../../src/cursor';

function harness() {
  let clock = 0;
  const sent: CursorPlace[] = [];
  const timers: { fn: () => void; at: number; live: boolean }[] = [];
  const reporter = new CursorReporter(
    (p) => sent.push(p),
    () => clock,
    (fn, ms) => {
      const t = { fn, at: clock + ms, live: true };
      timers.push(t);
      return t as unknown as ReturnType<typeof setTimeout>;
    },
    (t) => {
      (t as unknown as { live: boolean }).live = false;
    },
  );
  const advance = (ms: number) => {
    clock += ms;
    for (const t of timers) {
      if (t.live && t.at <= clock) {
        t.live = false;
        t.fn();
      }
    }
  };
  return { reporter, sent, advance };
}

const A = { uri: 'file:///a.py', line: 3, character: 4 };

describe('cursor reporter', () => {
  test('a cursor that rests is reported once', () => {
    const { reporter, sent, advance } = harness();
    reporter.moved(A);
    advance(CURSOR_REST_MS - 1);
    assert.equal(sent.length, 0);
    advance(1);
    assert.deepEqual(sent, [A]);
    reporter.moved(A);
    advance(CURSOR_REST_MS);
    assert.equal(sent.length, 1); // the same place again: nothing new to warm
  });
  test('only the last of quick moves is reported', () => {
    const { reporter, sent, advance } = harness();
    reporter.moved(A);
    advance(10);
    reporter.moved({ ...A, line: 9 });
    advance(CURSOR_REST_MS);
    assert.deepEqual(sent, [{ ...A, line: 9 }]);
  });
  test('a move caused by typing is not reported, a later one is', () => {
    const { reporter, sent, advance } = harness();
    reporter.edited(A.uri);
    reporter.moved(A);
    advance(CURSOR_REST_MS);
    assert.equal(sent.length, 0);
    advance(EDIT_SHADOW_MS);
    reporter.moved(A);
    advance(CURSOR_REST_MS);
    assert.deepEqual(sent, [A]);
  });
  test('params are the notification shape', () => {
    assert.deepEqual(cursorParams(A), { textDocument: { uri: A.uri }, position: { line: 3, character: 4 } });
  });
});

describe('declareCursorReport', () => {
  test('declares the cursor report and keeps other experimental capabilities', () => {
    const caps: { experimental?: unknown } = { experimental: { other: 1 } };
    declareCursorReport(caps);
    assert.deepEqual(caps.experimental, { other: 1, structspec: { didMoveCursor: true } });
  });

  test('replaces an experimental value that is not an object', () => {
    for (const given of [undefined, null, 3, ['x']]) {
      const caps: { experimental?: unknown } = { experimental: given };
      declareCursorReport(caps);
      assert.deepEqual(caps.experimental, { structspec: { didMoveCursor: true } });
    }
  });
});

describe('synced schemes', () => {
  test('files, unsaved buffers and notebook cells report their cursor; other schemes do not', () => {
    for (const scheme of ['file', 'untitled', 'vscode-notebook-cell']) {
      assert.equal(reportsCursorIn(scheme), true, scheme);
    }
    for (const scheme of ['git', 'output', 'vscode-userdata', '', undefined]) {
      assert.equal(reportsCursorIn(scheme), false, String(scheme));
    }
  });
});

/** Unit tests of the status bar text from `structspec/status` notifications. */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { formatMetrics, parseStatus, statusView } from '../../src/status';

describe('parseStatus', () => {
  test('a full status', () => {
    const s = parseStatus({
      state: 'idle',
      model: '/models/gemma-3-270m-q4_k_m.gguf',
      tokensPerSecond: 84.4,
      acceptance: 0.625,
      lastLatencyMs: 132.2,
    });
    assert.deepEqual(s, {
      state: 'idle',
      model: '/models/gemma-3-270m-q4_k_m.gguf',
      tokensPerSecond: 84.4,
      acceptance: 0.625,
      lastLatencyMs: 132.2,
      message: undefined,
    });
  });
  test('malformed params are rejected or their bad fields dropped', () => {
    assert.equal(parseStatus(null), undefined);
    assert.equal(parseStatus([]), undefined);
    assert.equal(parseStatus({ state: 'dancing' }), undefined);
    const s = parseStatus({ state: 'busy', tokensPerSecond: 'fast', acceptance: -1, lastLatencyMs: Infinity, model: 3 });
    assert.deepEqual(s, { state: 'busy', model: undefined, tokensPerSecond: undefined, acceptance: undefined, lastLatencyMs: undefined, message: undefined });
  });
  test('acceptance given as a percentage', () => {
    assert.equal(parseStatus({ state: 'idle', acceptance: 62.5 })?.acceptance, 0.625);
    assert.equal(parseStatus({ state: 'idle', acceptance: 250 })?.acceptance, undefined);
  });
});

describe('statusView', () => {
  const last = parseStatus({ state: 'idle', model: '/m/gemma.gguf', tokensPerSecond: 84.4, acceptance: 0.625, lastLatencyMs: 132 });
  test('idle shows tokens/s and acceptance', () => {
    const v = statusView('idle', last);
    assert.equal(v.text, '$(sparkle) structspec 84 tok/s · 63%');
    assert.match(v.tooltip, /Model: gemma\.gguf/);
    assert.match(v.tooltip, /Last latency: 132 ms/);
    assert.equal(v.error, false);
  });
  test('busy spins', () => {
    assert.match(statusView('busy', last).text, /^\$\(loading~spin\) structspec/);
  });
  test('error carries the reason', () => {
    const v = statusView('error', undefined, 'cannot find the language server');
    assert.equal(v.error, true);
    assert.match(v.tooltip, /cannot find the language server/);
  });
  test('off and before any completion', () => {
    assert.equal(statusView('off', undefined).text, '$(circle-slash) structspec');
    assert.equal(statusView('idle', undefined).text, '$(sparkle) structspec');
    assert.equal(formatMetrics(undefined), '');
  });
});

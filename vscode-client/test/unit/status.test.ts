/** Unit tests of the status bar text from `structspec/status` notifications. */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { costLines, formatMetrics, parseStatus, statusView, withAcceptResult } from '../../src/status';

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
      accepted: undefined,
      shown: undefined,
      tokensPerSecond: 84.4,
      acceptance: 0.625,
      lastLatencyMs: 132.2,
      message: undefined,
      warming: false,
      cost: undefined,
    });
  });
  test('malformed params are rejected or their bad fields dropped', () => {
    assert.equal(parseStatus(null), undefined);
    assert.equal(parseStatus([]), undefined);
    assert.equal(parseStatus({ state: 'dancing' }), undefined);
    const s = parseStatus({ state: 'busy', tokensPerSecond: 'fast', acceptance: -1, lastLatencyMs: Infinity, model: 3 });
    assert.deepEqual(s, { state: 'busy', model: undefined, accepted: undefined, shown: undefined, tokensPerSecond: undefined, acceptance: undefined, lastLatencyMs: undefined, message: undefined, warming: false, cost: undefined });
  });
  test('acceptance outside 0..1 is dropped', () => {
    assert.equal(parseStatus({ state: 'idle', acceptance: 62.5 })?.acceptance, undefined);
  });
});

describe('statusView', () => {
  const last = parseStatus({ state: 'idle', model: '/m/gemma.gguf', tokensPerSecond: 84.4, acceptance: 0.625, lastLatencyMs: 132 });
  test('idle shows tokens/s and acceptance', () => {
    const v = statusView('idle', last);
    assert.equal(v.text, '$(sparkle) structspec 84 tok/s · $(check) 63%');
    assert.match(v.tooltip, /Model: gemma\.gguf/);
    assert.match(v.tooltip, /Last latency: 132 ms/);
    assert.equal(v.error, false);
  });
  test('busy spins', () => {
    assert.match(statusView('busy', last).text, /^\$\(loading~spin\) structspec/);
  });
  test('warming says so, with the file', () => {
    const warming = parseStatus({ state: 'busy', message: 'warming a.py', warming: true });
    assert.equal(warming?.warming, true);
    const v = statusView('busy', warming);
    assert.equal(v.text, '$(loading~spin) structspec warming');
    assert.match(v.tooltip, /structspec: warming a\.py/);
    assert.equal(parseStatus({ state: 'busy', warming: 'yes' })?.warming, false);
  });
  test('error carries the reason', () => {
    const v = statusView('error', undefined, 'cannot find the language server');
    assert.equal(v.error, true);
    assert.match(v.tooltip, /cannot find the language server/);
  });
  test('no acceptance before a suggestion was shown', () => {
    const fresh = parseStatus({ state: 'idle', acceptance: 0, tokensPerSecond: null, stats: { shown: 0, accepted: 0 } });
    assert.equal(statusView('idle', fresh).text, '$(sparkle) structspec');
  });
  test('off or stopped, the last server\'s model and figures are not shown', () => {
    for (const state of ['off', 'stopped'] as const) {
      const v = statusView(state, last);
      assert.doesNotMatch(v.tooltip, /Model:|Last latency|Suggestions accepted|tokens\/s/);
      assert.doesNotMatch(v.text, /tok\/s/);
    }
  });
  test('off and before any completion', () => {
    assert.equal(statusView('off', undefined).text, '$(circle-slash) structspec');
    assert.equal(statusView('idle', undefined).text, '$(sparkle) structspec');
    assert.equal(formatMetrics(undefined), '');
  });
});

describe('the server as written (structspec/completion/service.py Status.to_json)', () => {
  const params = {
    state: 'idle',
    model: 'gemma-3-270m-q4_k_m.gguf',
    tokensPerSecond: 41.27,
    acceptance: 0.5,
    lastLatencyMs: 212.4,
    message: '',
    stats: { requests: 9, shown: 4, accepted: 2, acceptance: 0.5 },
  };
  test('parses and shows the counts', () => {
    const s = parseStatus(params);
    assert.equal(s?.accepted, 2);
    assert.equal(s?.shown, 4);
    assert.equal(s?.message, undefined);
    assert.match(statusView('idle', s).tooltip, /Suggestions accepted: 50% \(2 of 4\)/);
  });
  test('an accept answer updates the acceptance at once', () => {
    const s = withAcceptResult(parseStatus(params), { accepted: true, acceptance: 0.6 });
    assert.equal(s?.acceptance, 0.6);
    assert.equal(s?.accepted, 3);
    assert.equal(withAcceptResult(undefined, { accepted: true, acceptance: 1 }), undefined);
    assert.deepEqual(withAcceptResult(s, 'nonsense'), s);
  });
});

describe('what the model costs here', () => {
  const cost = { promptTokensPerSecond: 163.1, decodeTokensPerSecond: 11.6, windowTokens: 326, firstSuggestionMs: 2172 };
  test('the tooltip says the rates, the window and the first-suggestion time', () => {
    const s = parseStatus({ state: 'idle', model: '/m/qwen.gguf', cost });
    assert.deepEqual(s?.cost, cost);
    const tooltip = statusView('idle', s).tooltip;
    assert.match(tooltip, /On this machine: prompt 163 tokens\/s, decode 11\.6 tokens\/s/);
    assert.match(tooltip, /Prompt window: 326 tokens; first suggestion at a new place in about 2\.2 s/);
  });
  test('under a second it is said in milliseconds', () => {
    assert.match(costLines({ ...cost, firstSuggestionMs: 1000 * 0.98 }).join('\n'), /about 980 ms/);
  });
  test('a cost with a bad or missing field is not shown', () => {
    assert.equal(parseStatus({ state: 'idle', cost: { ...cost, windowTokens: 'many' } })?.cost, undefined);
    assert.equal(parseStatus({ state: 'idle', cost: { promptTokensPerSecond: 1 } })?.cost, undefined);
    assert.equal(parseStatus({ state: 'idle', cost: null })?.cost, undefined);
    assert.deepEqual(costLines(undefined), []);
  });
});

/**
 * The status bar item's text and tooltip, from the server's `structspec/status`
 * notification and the client's own state.
 *
 * Pure module (no `vscode` import) so that it is unit-tested under plain node.
 * The notification's params are outside input: every field is optional and
 * checked, and anything unexpected is shown as unknown rather than trusted.
 */

/** The custom notification the server sends when its state changes. */
export const STATUS_NOTIFICATION = 'structspec/status';

/** The server command each suggestion carries; it counts the acceptance. */
export const ACCEPT_COMMAND = 'structspec.accept';

/** What the client shows: the server's states plus the client's own. */
export type DisplayState = 'starting' | 'idle' | 'busy' | 'error' | 'off' | 'stopped';

/** The server's status, validated. */
export interface ServerStatus {
  readonly state: 'idle' | 'busy' | 'error';
  readonly model?: string;
  /** Tokens per second of the last completion. */
  readonly tokensPerSecond?: number;
  /** Share (0..1) of the suggestions shown that the user accepted. */
  readonly acceptance?: number;
  /** Suggestions accepted and shown so far (the server's `stats`). */
  readonly accepted?: number;
  readonly shown?: number;
  /** Milliseconds from request to answer of the last completion. */
  readonly lastLatencyMs?: number;
  /** A one-line explanation, mainly for `error` (`warming <file>` while warming). */
  readonly message?: string;
  /** The server is evaluating a prompt ahead of its answer (state `busy`). */
  readonly warming?: boolean;
  /** What the loaded model costs on this machine (absent: none loaded, or a remote backend). */
  readonly cost?: ModelCost;
}

/** The server's `cost`: the model's measured rates and what they chose. */
export interface ModelCost {
  readonly promptTokensPerSecond: number;
  readonly decodeTokensPerSecond: number;
  /** The prompt window in use (`structspec.windowTokens`, chosen from the rates unless set). */
  readonly windowTokens: number;
  /** The expected wait for a first suggestion at a new place. */
  readonly firstSuggestionMs: number;
}

function num(value: unknown): number | undefined {
  return typeof value === 'number' && Number.isFinite(value) && value >= 0 ? value : undefined;
}

function str(value: unknown): string | undefined {
  return typeof value === 'string' && value.length > 0 ? value : undefined;
}

/** Validate the status' `cost`; `undefined` unless every field is a number. */
function parseCost(value: unknown): ModelCost | undefined {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    return undefined;
  }
  const c = value as Record<string, unknown>;
  const cost = {
    promptTokensPerSecond: num(c.promptTokensPerSecond),
    decodeTokensPerSecond: num(c.decodeTokensPerSecond),
    windowTokens: num(c.windowTokens),
    firstSuggestionMs: num(c.firstSuggestionMs),
  };
  if (Object.values(cost).some((v) => v === undefined)) {
    return undefined;
  }
  return cost as ModelCost;
}

/**
 * Merge the answer of the `structspec.accept` command (`{accepted, acceptance}`)
 * into the last status, so the status bar counts an acceptance at once.
 */
export function withAcceptResult(last: ServerStatus | undefined, result: unknown): ServerStatus | undefined {
  if (last === undefined || typeof result !== 'object' || result === null) {
    return last;
  }
  const r = result as Record<string, unknown>;
  const acceptance = num(r.acceptance);
  if (acceptance === undefined || acceptance > 1) {
    return last;
  }
  const accepted = r.accepted === true && last.accepted !== undefined ? last.accepted + 1 : last.accepted;
  return { ...last, acceptance, accepted };
}

/** Validate the notification's params; `undefined` when they are not a status at all. */
export function parseStatus(params: unknown): ServerStatus | undefined {
  if (typeof params !== 'object' || params === null || Array.isArray(params)) {
    return undefined;
  }
  const p = params as Record<string, unknown>;
  const state = p.state;
  if (state !== 'idle' && state !== 'busy' && state !== 'error') {
    return undefined;
  }
  const share = num(p.acceptance);
  const acceptance = share !== undefined && share <= 1 ? share : undefined;
  const stats = typeof p.stats === 'object' && p.stats !== null && !Array.isArray(p.stats) ? (p.stats as Record<string, unknown>) : {};
  const status: ServerStatus = {
    state,
    model: str(p.model),
    accepted: num(stats.accepted),
    shown: num(stats.shown),
    tokensPerSecond: num(p.tokensPerSecond),
    acceptance,
    lastLatencyMs: num(p.lastLatencyMs),
    message: str(p.message),
    warming: p.warming === true,
    cost: parseCost(p.cost),
  };
  return status;
}

/** What to put in the status bar item. */
export interface StatusView {
  readonly text: string;
  /** Markdown-free plain tooltip, one fact per line. */
  readonly tooltip: string;
  /** Whether to paint the item with the error background. */
  readonly error: boolean;
}

function modelName(model: string | undefined): string | undefined {
  if (model === undefined) {
    return undefined;
  }
  const base = model.split(/[\\/]/).pop() ?? model;
  return base.length > 0 ? base : model;
}

/** Format the tokens/s of the last completion and the acceptance, e.g. `84 tok/s · $(check) 62%`. */
export function formatMetrics(status: ServerStatus | undefined): string {
  if (status === undefined) {
    return '';
  }
  const parts: string[] = [];
  if (status.tokensPerSecond !== undefined) {
    parts.push(`${Math.round(status.tokensPerSecond)} tok/s`);
  }
  // Acceptance means something only once a suggestion was shown.
  const anyShown = status.shown !== undefined ? status.shown > 0 : status.tokensPerSecond !== undefined;
  if (status.acceptance !== undefined && anyShown) {
    parts.push(`$(check) ${Math.round(status.acceptance * 100)}%`);
  }
  return parts.join(' · ');
}

/** The tooltip's lines on what the model costs here (none without a cost). */
export function costLines(cost: ModelCost | undefined): string[] {
  if (cost === undefined) {
    return [];
  }
  const first = cost.firstSuggestionMs < 1000 ? `${Math.round(cost.firstSuggestionMs)} ms` : `${(cost.firstSuggestionMs / 1000).toFixed(1)} s`;
  return [
    `On this machine: prompt ${Math.round(cost.promptTokensPerSecond)} tokens/s, decode ${cost.decodeTokensPerSecond.toFixed(1)} tokens/s`,
    `Prompt window: ${cost.windowTokens} tokens; first suggestion at a new place in about ${first}`,
  ];
}

/**
 * The status bar view. `status` is the last status the server sent (its
 * metrics stay visible while idle, not once it is off or stopped); `detail`
 * is the client's own message for `error`, `off` and `stopped`.
 */
export function statusView(state: DisplayState, status: ServerStatus | undefined, detail?: string): StatusView {
  const lines: string[] = [];
  // Off or stopped, no server runs: its last model and figures would say one does.
  const last = state === 'off' || state === 'stopped' ? undefined : status;
  const model = modelName(last?.model);
  const metrics = formatMetrics(last);
  let text: string;
  switch (state) {
    case 'starting':
      text = '$(loading~spin) structspec';
      lines.push('structspec: starting the language server');
      break;
    case 'busy':
      if (last?.warming === true) {
        text = '$(loading~spin) structspec warming';
        lines.push(`structspec: ${last.message ?? 'warming'} (evaluating the prompt; the suggestion comes when it ends)`);
      } else {
        text = '$(loading~spin) structspec' + (metrics ? ` ${metrics}` : '');
        lines.push(`structspec: ${last?.message ?? 'generating'}`);
      }
      break;
    case 'idle':
      text = '$(sparkle) structspec' + (metrics ? ` ${metrics}` : '');
      lines.push('structspec: ready');
      break;
    case 'error':
      text = '$(error) structspec';
      lines.push(`structspec: ${detail ?? last?.message ?? 'error'}`);
      break;
    case 'off':
      text = '$(circle-slash) structspec';
      lines.push('structspec: completions are off (run "structspec: Toggle Completions" to turn them on)');
      break;
    case 'stopped':
      text = '$(debug-stop) structspec';
      lines.push(`structspec: ${detail ?? 'the language server is not running'}`);
      break;
  }
  if (model !== undefined) {
    lines.push(`Model: ${model}`);
  }
  if (last?.tokensPerSecond !== undefined) {
    lines.push(`Last completion: ${last.tokensPerSecond.toFixed(1)} tokens/s`);
  }
  if (last?.acceptance !== undefined) {
    const counts = last.accepted !== undefined && last.shown !== undefined ? ` (${last.accepted} of ${last.shown})` : '';
    lines.push(`Suggestions accepted: ${(last.acceptance * 100).toFixed(0)}%${counts}`);
  }
  if (last?.lastLatencyMs !== undefined) {
    lines.push(`Last latency: ${Math.round(last.lastLatencyMs)} ms`);
  }
  lines.push(...costLines(last?.cost));
  lines.push('Click to show the log');
  return { text, tooltip: lines.join('\n'), error: state === 'error' };
}

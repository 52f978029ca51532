/**
 * Where the cursor rests, for the server's pre-warm.
 *
 * The language server protocol tells a server about edits, not about the
 * cursor. structspec pre-warms (evaluates the prompt of) the place the user
 * is looking at, so the first suggestion there does not pay the whole
 * prefill: the client reports a cursor that came to rest somewhere the user
 * did not just type (typing is reported by the edit itself). Pure logic, no
 * VS Code imports: unit-tested.
 */

/** The server's notification (``structspec.lsp.convert.CURSOR_NOTIFICATION``). */
export const CURSOR_NOTIFICATION = 'structspec/didMoveCursor';
/** Milliseconds a cursor must rest before it is reported. */
export const CURSOR_REST_MS = 250;
/** A move this soon after an edit of the same document is the edit's own. */
export const EDIT_SHADOW_MS = 100;

/**
 * URI schemes of the documents synced to the server: files, unsaved buffers
 * and notebook cells (each cell a document of its own, as VS Code names it,
 * synced with its notebook: the server declares notebook sync, and completes
 * a cell in the text of its notebook's cells joined; it reads no document
 * from disk, so any scheme's text is what the editor sent). Their cursor is
 * reported too (``reportsCursorIn``).
 */
export const SYNCED_SCHEMES: readonly string[] = ['file', 'untitled', 'vscode-notebook-cell'];

/** A document of this URI scheme is synced, so its cursor is reported. */
export function reportsCursorIn(scheme: string | undefined): boolean {
  return scheme !== undefined && SYNCED_SCHEMES.includes(scheme);
}

export interface CursorPlace {
  uri: string;
  line: number;
  character: number;
}

/**
 * Declares, in the client capabilities sent at ``initialize``, that this client
 * sends ``structspec/didMoveCursor`` (``structspec.lsp.convert.reports_cursor``):
 * the server then does not ask for the highlight requests it otherwise reads
 * the cursor's place from. Other experimental capabilities are kept.
 */
export function declareCursorReport(capabilities: { experimental?: unknown }): void {
  const given = capabilities.experimental;
  const kept = typeof given === 'object' && given !== null && !Array.isArray(given) ? given : {};
  capabilities.experimental = { ...kept, structspec: { didMoveCursor: true } };
}

/** The ``structspec/didMoveCursor`` notification's params. */
export function cursorParams(place: CursorPlace): { textDocument: { uri: string }; position: { line: number; character: number } } {
  return { textDocument: { uri: place.uri }, position: { line: place.line, character: place.character } };
}

/**
 * Decides which cursor moves are reported: one that rests ``CURSOR_REST_MS``,
 * not caused by an edit, not the place last reported. Timers are injected.
 */
export class CursorReporter {
  private timer: ReturnType<typeof setTimeout> | undefined;
  private lastEdit = new Map<string, number>();
  private lastSent: string | undefined;

  constructor(
    private readonly send: (place: CursorPlace) => void,
    private readonly now: () => number = Date.now,
    private readonly schedule: (fn: () => void, ms: number) => ReturnType<typeof setTimeout> = setTimeout,
    private readonly cancel: (timer: ReturnType<typeof setTimeout>) => void = clearTimeout,
  ) {}

  /** The user edited ``uri``: a move right after this is the edit's. */
  edited(uri: string): void {
    this.lastEdit.set(uri, this.now());
    this.lastSent = undefined; // the prompt changed: the same place is worth warming again
  }

  /** The cursor moved to ``place`` (a single empty selection). */
  moved(place: CursorPlace): void {
    this.stop();
    const edit = this.lastEdit.get(place.uri);
    if (edit !== undefined && this.now() - edit < EDIT_SHADOW_MS) {
      return;
    }
    const key = `${place.uri}\n${place.line}:${place.character}`;
    if (key === this.lastSent) {
      return;
    }
    this.timer = this.schedule(() => {
      this.timer = undefined;
      this.lastSent = key;
      this.send(place);
    }, CURSOR_REST_MS);
  }

  /** The document closed: forget it. */
  closed(uri: string): void {
    this.lastEdit.delete(uri);
  }

  stop(): void {
    if (this.timer !== undefined) {
      this.cancel(this.timer);
      this.timer = undefined;
    }
  }
}

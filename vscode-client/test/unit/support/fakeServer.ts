/**
 * A tiny LSP server on stdio for the controller tests. FAKE_MODE:
 *   ok     answer initialize (completion and inline completion offered) and
 *          completion requests, log every message to FAKE_LOG (one JSON a line);
 *   hang   never answer (a server stuck before initialize);
 *   crash  exit 1 right after `initialized`.
 * Each start appends `start <pid>` to FAKE_LOG.
 */
import * as fs from 'node:fs';

const mode = process.env.FAKE_MODE ?? 'ok';
const logFile = process.env.FAKE_LOG ?? '/dev/null';
const note = (line: string): void => fs.appendFileSync(logFile, line + '\n');
note(`start ${process.pid}`);

function send(msg: object): void {
  const body = JSON.stringify({ jsonrpc: '2.0', ...msg });
  process.stdout.write(`Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
}

let buf = Buffer.alloc(0);
process.stdin.on('data', (chunk: Buffer) => {
  buf = Buffer.concat([buf, chunk]);
  for (;;) {
    const sep = buf.indexOf('\r\n\r\n');
    if (sep < 0) return;
    const m = /Content-Length: (\d+)/i.exec(buf.subarray(0, sep).toString());
    const len = Number(m?.[1] ?? 0);
    if (buf.length < sep + 4 + len) return;
    const msg = JSON.parse(buf.subarray(sep + 4, sep + 4 + len).toString()) as { id?: number; method?: string; params?: unknown };
    buf = buf.subarray(sep + 4 + len);
    note(JSON.stringify(msg));
    if (mode === 'hang') continue;
    if (msg.method === 'initialize') {
      const capabilities = { textDocumentSync: 1, completionProvider: {}, inlineCompletionProvider: true };
      send({ id: msg.id, result: { capabilities } });
    }
    else if (msg.method === 'textDocument/completion') send({ id: msg.id, result: [{ label: 'menu' }] });
    else if (msg.method === 'initialized' && mode === 'crash') process.exit(1);
    else if (msg.method === 'shutdown') send({ id: msg.id, result: null });
    else if (msg.method === 'exit') process.exit(0);
  }
});
// A hung server ignores the end of its input as well.
if (mode === 'hang') process.stdin.on('end', () => setInterval(() => undefined, 1000));

/**
 * HTTP/2's own limits on the ingest port (backends/h2.ts; issue 20): SETTINGS_MAX_CONCURRENT_STREAMS
 * and SETTINGS_MAX_HEADER_LIST_SIZE. A client that opens more streams than allowed has the extra
 * ones refused (RFC 9113 §5.1.2: RST_STREAM, REFUSED_STREAM or PROTOCOL_ERROR) while its streams
 * within the limit carry on; a header list over the limit is refused; another client on its own
 * connection meanwhile gets its 202. Raw frames over h2c (node's own client would hold back what
 * the server's SETTINGS forbid), on the node backend (the uring backend hands h2 to the same code).
 */
import http2 from 'node:http2';
import net from 'node:net';
import { type BodySink, createNodeServer, type IngestHandler, type IngestServer } from '@spillway/ingest';
import { afterEach, describe, expect, it } from 'vitest';
import {
  FLAG,
  FRAME,
  type Frame,
  frame,
  frameReader,
  H2_PREFACE,
  postHeaders,
  settings,
  settingsAck,
} from '../../../test/helpers/h2-frames.ts';

const CODE = { PROTOCOL_ERROR: 0x1, REFUSED_STREAM: 0x7, ENHANCE_YOUR_CALM: 0xb } as const;

/** `/ingest/hold` streams wait until released; anything else is answered 202 once its body ends. */
function holdingHandler() {
  const held: (() => void)[] = [];
  let begun = 0;
  const sink = (hold: boolean): BodySink => ({
    maxBodyBytes: 1048576,
    write: () => {},
    end: async () => {
      if (hold) await new Promise<void>((r) => held.push(r));
      return { status: 202, body: { id: 'x' } };
    },
    abort: () => {},
  });
  const handler: IngestHandler = {
    begin: async (head) => {
      begun++;
      return { accept: sink(head.url === '/ingest/hold') };
    },
  };
  return {
    handler,
    begun: () => begun,
    release() {
      for (const r of held.splice(0)) r();
    },
  };
}

const servers: IngestServer[] = [];
afterEach(async () => {
  for (const s of servers.splice(0)) await s.close();
});

async function serve(
  handler: IngestHandler,
  limits: { maxConcurrentStreams?: number; maxHeaderListBytes?: number },
) {
  const srv = createNodeServer({ handler, port: 0, host: '127.0.0.1', http2: limits });
  servers.push(srv);
  return (await srv.listen()).port;
}

/** A raw h2c connection: the preface and SETTINGS sent, the server's SETTINGS awaited and acked. */
async function rawH2c(port: number) {
  const sock = net.connect(port, '127.0.0.1');
  sock.on('error', () => {});
  const frames: Frame[] = [];
  let closed = false;
  sock.on('close', () => {
    closed = true;
  });
  const read = frameReader((f) => {
    frames.push(f);
    if (f.type === FRAME.SETTINGS && !(f.flags & FLAG.ACK)) sock.write(settingsAck());
  });
  sock.on('data', read);
  await new Promise((r) => sock.once('connect', r));
  sock.write(Buffer.concat([H2_PREFACE, settings()]));
  const deadline = Date.now() + 3000;
  while (!frames.some((f) => f.type === FRAME.SETTINGS && !(f.flags & FLAG.ACK)) && Date.now() < deadline)
    await new Promise((r) => setTimeout(r, 10));
  return {
    sock,
    frames,
    closed: () => closed,
    /** RST_STREAM codes by stream. */
    resets: () =>
      new Map(
        frames.filter((f) => f.type === FRAME.RST_STREAM).map((f) => [f.stream, f.payload.readUInt32BE(0)]),
      ),
    /** :status of the HEADERS the server sent on `stream` (static-table indexed status only). */
    answered: (stream: number) => frames.some((f) => f.type === FRAME.HEADERS && f.stream === stream),
  };
}

/** The server's SETTINGS value for `id`, as sent on a raw connection. */
function settingOf(frames: Frame[], id: number): number | undefined {
  for (const f of frames) {
    if (f.type !== FRAME.SETTINGS || f.flags & FLAG.ACK) continue;
    for (let o = 0; o + 6 <= f.payload.length; o += 6)
      if (f.payload.readUInt16BE(o) === id) return f.payload.readUInt32BE(o + 2);
  }
  return undefined;
}

/** One POST on its own node:http2 connection: the status. */
async function otherClient(port: number, path = '/ingest/other'): Promise<number> {
  const c = http2.connect(`http://127.0.0.1:${port}`);
  c.on('error', () => {});
  try {
    return await new Promise<number>((resolve, reject) => {
      const req = c.request({ ':method': 'POST', ':path': path, 'content-type': 'application/json' });
      req.on('response', (h) => resolve(Number(h[':status'])));
      req.on('error', reject);
      req.end('{}');
    });
  } finally {
    c.close();
  }
}

const wait = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** HPACK string (RFC 7541 §5.2, no Huffman) with its 7-bit-prefix length. */
function hpackString(s: string): Buffer {
  const v = Buffer.from(s, 'latin1');
  const len: number[] = [];
  if (v.length < 127) len.push(v.length);
  else {
    len.push(127);
    let n = v.length - 127;
    while (n >= 128) {
      len.push((n % 128) + 128);
      n = Math.floor(n / 128);
    }
    len.push(n);
  }
  return Buffer.concat([Buffer.from(len), v]);
}

/** HEADERS for `POST path` with one extra literal header `name: value` (any length). */
function postWithHeader(stream: number, path: string, name: string, value: string): Buffer {
  const base = postHeaders(stream, path, false);
  const block = Buffer.concat([base.subarray(9), Buffer.from([0x00]), hpackString(name), hpackString(value)]);
  return frame(FRAME.HEADERS, FLAG.END_HEADERS, stream, block);
}

describe('HTTP/2 limits (h2c, node backend)', () => {
  it('streams past SETTINGS_MAX_CONCURRENT_STREAMS are refused; other clients carry on', async () => {
    const h = holdingHandler();
    const port = await serve(h.handler, { maxConcurrentStreams: 4 });
    // Another client holds streams within the limit on its own connection throughout.
    const good = await rawH2c(port);
    good.sock.write(Buffer.concat([1, 3, 5, 7].map((id) => postHeaders(id, '/ingest/hold', false))));
    const c = await rawH2c(port);
    expect(settingOf(c.frames, 0x3)).toBe(4);
    // Six streams opened and left open (no END_STREAM: a body would follow): 1,3,5,7 fit, 9 and 11 do not.
    c.sock.write(Buffer.concat([1, 3, 5, 7, 9, 11].map((id) => postHeaders(id, '/ingest/hold', false))));
    const deadline = Date.now() + 3000;
    const goaway = () => c.frames.find((f) => f.type === FRAME.GOAWAY);
    while (!goaway() && c.resets().size < 2 && Date.now() < deadline) await wait(20);
    // RFC 9113 §5.1.2: a stream error (REFUSED_STREAM or PROTOCOL_ERROR) for the streams past the
    // limit, which §5.4.1 lets an endpoint treat as a connection error: nghttp2 does, with
    // GOAWAY(PROTOCOL_ERROR) whose last stream is the last one within the limit. Either way, the
    // streams past the limit are never served.
    const g = goaway();
    if (g) {
      expect(g.payload.readUInt32BE(4)).toBe(CODE.PROTOCOL_ERROR);
      expect(g.payload.readUInt32BE(0) & 0x7fffffff).toBe(7);
    } else {
      const resets = c.resets();
      expect([...resets.keys()].sort((x, y) => x - y)).toEqual([9, 11]);
      for (const code of resets.values()) expect([CODE.REFUSED_STREAM, CODE.PROTOCOL_ERROR]).toContain(code);
    }
    expect(c.answered(9) || c.answered(11)).toBe(false);
    // The other client's four streams reached the handler, its connection is untouched, and a
    // third client is served meanwhile.
    await wait(50);
    expect(h.begun()).toBeGreaterThanOrEqual(4);
    expect(good.frames.some((f) => f.type === FRAME.GOAWAY || f.type === FRAME.RST_STREAM)).toBe(false);
    expect(await otherClient(port)).toBe(202);
    // Its held streams end their bodies and are answered.
    good.sock.write(
      Buffer.concat([1, 3, 5, 7].map((id) => frame(FRAME.DATA, FLAG.END_STREAM, id, Buffer.from('{}')))),
    );
    await wait(50);
    h.release();
    const until = Date.now() + 3000;
    while (![1, 3, 5, 7].every((id) => good.answered(id)) && Date.now() < until) await wait(20);
    expect([1, 3, 5, 7].every((id) => good.answered(id))).toBe(true);
    c.sock.destroy();
    good.sock.destroy();
  });

  it('a header list over SETTINGS_MAX_HEADER_LIST_SIZE is refused; other clients carry on', async () => {
    const h = holdingHandler();
    const port = await serve(h.handler, { maxHeaderListBytes: 2048 });
    const c = await rawH2c(port);
    expect(settingOf(c.frames, 0x6)).toBe(2048);
    // 4 KiB in one header: over the 2 KiB list. Then, on the same connection, a small request.
    c.sock.write(
      Buffer.concat([
        postWithHeader(1, '/ingest/big', 'x-pad', 'p'.repeat(4096)),
        frame(FRAME.DATA, FLAG.END_STREAM, 1, Buffer.from('{}')),
      ]),
    );
    const deadline = Date.now() + 3000;
    const refused = () =>
      c.resets().has(1) || c.closed() || c.frames.some((f) => f.type === FRAME.GOAWAY) || c.answered(1);
    while (!refused() && Date.now() < deadline) await wait(20);
    // Never reached the handler: refused by the stream's reset (or a 431), not served.
    expect(refused()).toBe(true);
    expect(h.begun()).toBe(0);
    const answeredWith = c.frames.find((f) => f.type === FRAME.HEADERS && f.stream === 1);
    if (answeredWith) expect(answeredWith.payload.toString('latin1')).toMatch(/431/);
    // A header list within the limit on a fresh connection, and another client, are served.
    const d = await rawH2c(port);
    d.sock.write(
      Buffer.concat([
        postWithHeader(1, '/ingest/small', 'x-pad', 'p'.repeat(512)),
        frame(FRAME.DATA, FLAG.END_STREAM, 1, Buffer.from('{}')),
      ]),
    );
    const until = Date.now() + 3000;
    while (!d.answered(1) && Date.now() < until) await wait(20);
    expect(d.answered(1)).toBe(true);
    expect(h.begun()).toBe(1);
    expect(await otherClient(port)).toBe(202);
    c.sock.destroy();
    d.sock.destroy();
  });
});

/**
 * The io_uring backend over real sockets: malformed and smuggling-shaped requests, keep-alive and
 * pipelining, body caps. The handler is a real IngestHandler that records what reached it.
 */
import { connect, type Socket } from 'node:net';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createUringServer, probeUring, type UringIngestServer } from '../src/backends/uring.ts';
import type { BodySink, IngestHandler, IngestResponse, RequestHead } from '../src/server.ts';

const probe = probeUring();

interface Seen {
  head: RequestHead;
  body: Buffer[];
  ended: boolean;
  aborted: string | undefined;
}

interface HandlerOpts {
  sinkCap?: number;
  delay?: (head: RequestHead) => number;
  /** Refuse on the head, as the pipeline does for other methods: 405 + Allow. */
  postOnly?: boolean;
  /** end() never resolves for these requests (a lost answer). */
  hang?: (head: RequestHead) => boolean;
}

function recordingHandler(opts: HandlerOpts = {}) {
  const seen: Seen[] = [];
  const handler: IngestHandler = {
    async begin(head) {
      const rec: Seen = { head, body: [], ended: false, aborted: undefined };
      seen.push(rec);
      const ms = opts.delay?.(head) ?? 0;
      if (ms) await new Promise((r) => setTimeout(r, ms));
      if (opts.postOnly && head.method !== 'POST')
        return {
          reject: {
            status: 405,
            headers: { allow: 'POST' },
            body: { error: { code: 'method_not_allowed' } },
          },
        };
      const sink: BodySink = {
        maxBodyBytes: opts.sinkCap ?? 1 << 20,
        write(chunk) {
          rec.body.push(Buffer.from(chunk));
        },
        async end(): Promise<IngestResponse> {
          if (opts.hang?.(head)) return new Promise<IngestResponse>(() => undefined);
          rec.ended = true;
          const body = Buffer.concat(rec.body);
          return {
            status: 202,
            headers: { 'x-url': head.url },
            body: { url: head.url, bytes: body.length, text: body.toString('latin1') },
          };
        },
        abort(reason) {
          rec.aborted = reason;
        },
      };
      return { accept: sink };
    },
  };
  return { handler, seen };
}

interface Parsed {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/** Splits a byte stream into HTTP/1.1 responses (content-length framed, as the backend sends). */
function parseResponses(data: Buffer): Parsed[] {
  const out: Parsed[] = [];
  let s = data.toString('latin1');
  while (s.length) {
    const end = s.indexOf('\r\n\r\n');
    if (end < 0) break;
    const lines = s.slice(0, end).split('\r\n');
    const status = Number(lines[0]!.split(' ')[1]);
    const headers: Record<string, string> = {};
    for (const l of lines.slice(1)) {
      const i = l.indexOf(':');
      headers[l.slice(0, i).toLowerCase()] = l.slice(i + 1).trim();
    }
    const len = Number(headers['content-length'] ?? 0);
    if (s.length < end + 4 + len) break; // body still arriving
    out.push({ status, headers, body: s.slice(end + 4, end + 4 + len) });
    s = s.slice(end + 4 + len);
  }
  return out;
}

/** Writes bytes (each element a separate write), reads until the server closes or goes quiet. */
async function exchange(
  port: number,
  writes: (string | Buffer)[],
  quietMs = 1500,
): Promise<{ data: Buffer; closed: boolean; sock: Socket }> {
  const sock = connect(port, '127.0.0.1');
  sock.setNoDelay(true);
  const chunks: Buffer[] = [];
  let closed = false;
  let timer: NodeJS.Timeout | undefined;
  const done = new Promise<void>((resolve) => {
    const arm = () => {
      clearTimeout(timer);
      timer = setTimeout(resolve, quietMs);
    };
    sock.on('data', (d) => {
      chunks.push(d);
      arm();
    });
    sock.on('end', () => {
      closed = true;
      resolve();
    });
    sock.on('close', () => {
      closed = true;
      resolve();
    });
    sock.on('error', () => {
      closed = true;
      resolve();
    });
    arm();
  });
  await new Promise<void>((r) => sock.once('connect', () => r()));
  for (const w of writes) {
    if (sock.destroyed) break;
    sock.write(typeof w === 'string' ? Buffer.from(w, 'latin1') : w);
    await new Promise((r) => setTimeout(r, 5));
  }
  await done;
  clearTimeout(timer);
  return { data: Buffer.concat(chunks), closed, sock };
}

/** Reads exactly n responses from an open socket. */
function readResponses(sock: Socket, n: number): Promise<Parsed[]> {
  return new Promise((resolve, reject) => {
    let buf = Buffer.alloc(0);
    const onData = (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      const got = parseResponses(buf);
      if (got.length >= n) {
        sock.off('data', onData);
        resolve(got);
      }
    };
    sock.on('data', onData);
    sock.once('close', () =>
      reject(new Error(`closed after ${parseResponses(buf).length} of ${n} responses`)),
    );
  });
}

const servers: UringIngestServer[] = [];
const sockets: Socket[] = [];
afterEach(async () => {
  for (const s of sockets.splice(0)) s.destroy();
  await Promise.all(servers.splice(0).map((s) => s.close()));
});

async function start(
  opts: HandlerOpts & { maxBodyBytes?: number | null; maxHeaders?: number; answerTimeoutMs?: number } = {},
) {
  const { handler, seen } = recordingHandler(opts);
  const server = createUringServer({
    handler,
    host: '127.0.0.1',
    port: 0,
    // null: no global cap (the ingest role's setting); the sink's and the routes' caps decide.
    ...(opts.maxBodyBytes !== null && { maxBodyBytes: opts.maxBodyBytes ?? 1000 }),
    closeGraceMs: 200,
    ...(opts.maxHeaders !== undefined && { maxHeaders: opts.maxHeaders }),
    ...(opts.answerTimeoutMs !== undefined && { answerTimeoutMs: opts.answerTimeoutMs }),
  });
  servers.push(server);
  const { port } = await server.listen();
  return { server, port, seen };
}

const H = 'Host: test\r\n';

/**
 * Three 512-byte chunks against a 1000-byte cap (the server's or the sink's, per `opts`): 413 and
 * close once the cap is passed; the sink is aborted, never ended, and got no more than the cap.
 */
async function chunkedPastCap(opts: Parameters<typeof start>[0]) {
  const { port, seen } = await start(opts);
  const chunk = `200\r\n${'z'.repeat(0x200)}\r\n`;
  const { data, closed } = await exchange(port, [
    `POST /chunky HTTP/1.1\r\n${H}Transfer-Encoding: chunked\r\n\r\n`,
    chunk,
    chunk,
    chunk,
    '0\r\n\r\n',
  ]);
  expect(parseResponses(data).map((r) => r.status)).toEqual([413]);
  expect(closed).toBe(true);
  await expect.poll(() => seen[0]?.aborted).toBeTruthy();
  expect(seen[0]!.ended).toBe(false);
  expect(Buffer.concat(seen[0]!.body).length).toBeLessThanOrEqual(1000);
}
const many = (n: number) => Array.from({ length: n }, (_, i) => `X-H${i}: v\r\n`).join('');
const MALFORMED: [name: string, raw: string, status: number][] = [
  [
    'Content-Length with Transfer-Encoding',
    `POST /a HTTP/1.1\r\n${H}Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n`,
    400,
  ],
  [
    'Transfer-Encoding then Content-Length',
    `POST /a HTTP/1.1\r\n${H}Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n`,
    400,
  ],
  [
    'duplicate Content-Length, same value',
    `POST /a HTTP/1.1\r\n${H}Content-Length: 5\r\nContent-Length: 5\r\n\r\nhello`,
    400,
  ],
  [
    'duplicate Content-Length, different values',
    `POST /a HTTP/1.1\r\n${H}Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!`,
    400,
  ],
  ['Content-Length list', `POST /a HTTP/1.1\r\n${H}Content-Length: 5, 5\r\n\r\nhello`, 400],
  ['Content-Length with plus sign', `POST /a HTTP/1.1\r\n${H}Content-Length: +5\r\n\r\nhello`, 400],
  ['negative Content-Length', `POST /a HTTP/1.1\r\n${H}Content-Length: -1\r\n\r\n`, 400],
  ['hex Content-Length', `POST /a HTTP/1.1\r\n${H}Content-Length: 0x5\r\n\r\nhello`, 400],
  ['Content-Length with inner space', `POST /a HTTP/1.1\r\n${H}Content-Length: 1 2\r\n\r\nhello`, 400],
  ['empty Content-Length', `POST /a HTTP/1.1\r\n${H}Content-Length:\r\n\r\n`, 400],
  ['Content-Length overflow', `POST /a HTTP/1.1\r\n${H}Content-Length: 99999999999999999999\r\n\r\n`, 400],
  ['Transfer-Encoding gzip', `POST /a HTTP/1.1\r\n${H}Transfer-Encoding: gzip\r\n\r\n`, 400],
  [
    'Transfer-Encoding not ending in chunked',
    `POST /a HTTP/1.1\r\n${H}Transfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n`,
    400,
  ],
  ['Transfer-Encoding misspelt', `POST /a HTTP/1.1\r\n${H}Transfer-Encoding: xchunked\r\n\r\n0\r\n\r\n`, 400],
  [
    'duplicate Transfer-Encoding',
    `POST /a HTTP/1.1\r\n${H}Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n`,
    400,
  ],
  ['Transfer-Encoding in HTTP/1.0', `POST /a HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n`, 400],
  [
    'Transfer-Encoding with an unsupported coding before chunked',
    `POST /a HTTP/1.1\r\n${H}Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n`,
    501,
  ],
  ['bare LF line endings', `POST /a HTTP/1.1\n${H}Content-Length: 0\n\n`, 400],
  ['bare LF inside headers', `POST /a HTTP/1.1\r\n${H}Content-Length: 0\nX: y\r\n\r\n`, 400],
  ['bare CR in a header value', `POST /a HTTP/1.1\r\n${H}X: a\rb\r\nContent-Length: 0\r\n\r\n`, 400],
  [
    'obs-fold continuation line',
    `POST /a HTTP/1.1\r\n${H}X-Long: a\r\n  b\r\nContent-Length: 0\r\n\r\n`,
    400,
  ],
  ['whitespace before the colon', `POST /a HTTP/1.1\r\n${H}Content-Length : 5\r\n\r\nhello`, 400],
  ['space inside a field name', `POST /a HTTP/1.1\r\n${H}Bad Name: x\r\nContent-Length: 0\r\n\r\n`, 400],
  ['NUL in a field value', `POST /a HTTP/1.1\r\n${H}X: a\0b\r\nContent-Length: 0\r\n\r\n`, 400],
  ['DEL in a field value', `POST /a HTTP/1.1\r\n${H}X: a\x7fb\r\nContent-Length: 0\r\n\r\n`, 400],
  ['HTTP/1.1 without Host', `POST /a HTTP/1.1\r\nContent-Length: 0\r\n\r\n`, 400],
  ['two Host fields', `POST /a HTTP/1.1\r\n${H}Host: evil\r\nContent-Length: 0\r\n\r\n`, 400],
  ['absolute-form target', `POST http://test/a HTTP/1.1\r\n${H}Content-Length: 0\r\n\r\n`, 400],
  ['space inside the target', `POST /a b HTTP/1.1\r\n${H}Content-Length: 0\r\n\r\n`, 400],
  ['double space in the request line', `POST  /a HTTP/1.1\r\n${H}Content-Length: 0\r\n\r\n`, 400],
  ['leading space before the method', ` POST /a HTTP/1.1\r\n${H}Content-Length: 0\r\n\r\n`, 400],
  ['bad byte in the method', `PO(ST /a HTTP/1.1\r\n${H}Content-Length: 0\r\n\r\n`, 400],
  ['lowercase protocol name', `POST /a http/1.1\r\n${H}Content-Length: 0\r\n\r\n`, 400],
  ['HTTP/2.0 request line', `POST /a HTTP/2.0\r\n${H}Content-Length: 0\r\n\r\n`, 505],
  ['too many header fields', `POST /a HTTP/1.1\r\n${H}${many(70)}Content-Length: 0\r\n\r\n`, 431],
  [
    'head larger than the limit',
    `POST /a HTTP/1.1\r\n${H}X-Big: ${'a'.repeat(20_000)}\r\nContent-Length: 0\r\n\r\n`,
    431,
  ],
  ['asterisk-form target', `OPTIONS * HTTP/1.1\r\n${H}\r\n`, 400],
  ['authority-form target', `CONNECT test:443 HTTP/1.1\r\n${H}\r\n`, 400],
  ['Content-Length over the global cap', `POST /a HTTP/1.1\r\n${H}Content-Length: 1001\r\n\r\n`, 413],
];

describe.skipIf(!probe.ok)('uring backend: malformed and smuggling-shaped requests', () => {
  it(`has a table of at least 25 cases (${MALFORMED.length})`, () => {
    expect(MALFORMED.length).toBeGreaterThanOrEqual(25);
  });

  it.each(MALFORMED.map(([name, raw, status]) => ({ name, raw, status })))(
    '$name → $status, closed, handler never called',
    async ({ raw, status }) => {
      const { port, seen } = await start();
      const { data, closed } = await exchange(port, [raw]);
      const res = parseResponses(data);
      expect(res.map((r) => r.status)).toEqual([status]);
      expect(res[0]!.headers.connection).toBe('close');
      expect(res[0]!.headers['content-type']).toBe('application/json');
      expect(JSON.parse(res[0]!.body)).toMatchObject({ error: { code: expect.any(String) } });
      expect(closed).toBe(true);
      expect(seen).toEqual([]);
    },
  );

  it('a smuggled second request after a refused one is never parsed', async () => {
    const { port, seen } = await start();
    const smuggle = `POST /a HTTP/1.1\r\n${H}Content-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nPOST /evil HTTP/1.1\r\n${H}Content-Length: 0\r\n\r\n`;
    const { data } = await exchange(port, [smuggle]);
    expect(parseResponses(data).map((r) => r.status)).toEqual([400]);
    expect(seen).toEqual([]);
  });

  it.each([
    ['non-hex chunk size', '5\r\nhello\r\nzz\r\n'],
    ['chunk data not followed by CRLF', '5\r\nhelloXX0\r\n\r\n'],
    ['bare LF after the chunk size', '5\nhello\r\n0\r\n\r\n'],
    ['chunk size with too many digits', '00000000000000005\r\nhello\r\n0\r\n\r\n'],
  ])('bad chunked framing (%s) → 400, sink aborted, never ended', async (_name, body) => {
    const { port, seen } = await start();
    const { data, closed } = await exchange(port, [
      `POST /c HTTP/1.1\r\n${H}Transfer-Encoding: chunked\r\n\r\n${body}`,
    ]);
    expect(parseResponses(data).map((r) => r.status)).toEqual([400]);
    expect(closed).toBe(true);
    expect(seen.length).toBe(1);
    await expect.poll(() => seen[0]!.aborted).toBeTruthy();
    expect(seen[0]!.ended).toBe(false);
  });

  it('accepts a well-formed request on the same server afterwards (control)', async () => {
    const { port, seen } = await start();
    const { data } = await exchange(port, [
      `POST /ok HTTP/1.1\r\n${H}Content-Length: 5\r\nConnection: close\r\n\r\nhello`,
    ]);
    const [r] = parseResponses(data);
    expect(r!.status).toBe(202);
    expect(JSON.parse(r!.body)).toEqual({ url: '/ok', bytes: 5, text: 'hello' });
    expect(seen.map((s) => s.head.url)).toEqual(['/ok']);
    expect(seen[0]!.head.headers.host).toBe('test');
    expect(seen[0]!.head.contentLength).toBe(5);
    expect(seen[0]!.head.remoteAddress).toBe('127.0.0.1');
  });
});

describe.skipIf(!probe.ok)('uring backend: keep-alive and pipelining', () => {
  it('answers several requests sent in one write, in order, and keeps the connection', async () => {
    // The first request is the slowest to decide: answers must still come back in request order.
    const { port, seen } = await start({ delay: (h) => (h.url === '/1' ? 80 : h.url === '/2' ? 5 : 0) });
    const sock = connect(port, '127.0.0.1');
    sockets.push(sock);
    await new Promise<void>((r) => sock.once('connect', () => r()));
    const batch =
      `POST /1 HTTP/1.1\r\n${H}Content-Length: 3\r\n\r\none` +
      `POST /2 HTTP/1.1\r\n${H}Transfer-Encoding: chunked\r\n\r\n3\r\ntwo\r\n2;x=y\r\n!!\r\n0\r\nX-Trailer: t\r\n\r\n` +
      `POST /3 HTTP/1.1\r\n${H}Content-Length: 0\r\n\r\n` +
      `POST /4?q=1 HTTP/1.1\r\n${H}Content-Length: 4\r\n\r\nfour`;
    const got = readResponses(sock, 4);
    sock.write(batch);
    const res = await got;
    expect(res.map((r) => r.status)).toEqual([202, 202, 202, 202]);
    expect(res.map((r) => JSON.parse(r.body))).toEqual([
      { url: '/1', bytes: 3, text: 'one' },
      { url: '/2', bytes: 5, text: 'two!!' },
      { url: '/3', bytes: 0, text: '' },
      { url: '/4?q=1', bytes: 4, text: 'four' },
    ]);
    expect(res.map((r) => r.headers['x-url'])).toEqual(['/1', '/2', '/3', '/4?q=1']);
    expect(res.every((r) => r.headers.connection === undefined)).toBe(true);
    expect(seen[1]!.head.contentLength).toBeUndefined();

    // Same connection, a request split byte by byte across writes.
    const again = readResponses(sock, 1);
    for (const ch of `POST /5 HTTP/1.1\r\n${H}Content-Length: 2\r\n\r\nok`) sock.write(ch);
    expect(JSON.parse((await again)[0]!.body)).toEqual({ url: '/5', bytes: 2, text: 'ok' });
    expect(seen.map((s) => s.head.url)).toEqual(['/1', '/2', '/3', '/4?q=1', '/5']);
  });

  it('a refused request in a pipeline closes the connection after the earlier answers', async () => {
    const { port, seen } = await start();
    const { data, closed } = await exchange(port, [
      `POST /1 HTTP/1.1\r\n${H}Content-Length: 1\r\n\r\na` +
        `POST /2 HTTP/1.1\r\n${H}Content-Length: 1\r\nContent-Length: 1\r\n\r\nb` +
        `POST /3 HTTP/1.1\r\n${H}Content-Length: 0\r\n\r\n`,
    ]);
    expect(parseResponses(data).map((r) => r.status)).toEqual([202, 400]);
    expect(closed).toBe(true);
    expect(seen.map((s) => s.head.url)).toEqual(['/1']);
  });

  it('every method reaches the handler; its 405 keeps a body-less connection usable and HEAD gets no body', async () => {
    const { port, seen } = await start({ postOnly: true });
    const sock = connect(port, '127.0.0.1');
    sockets.push(sock);
    await new Promise<void>((r) => sock.once('connect', () => r()));
    const chunks: Buffer[] = [];
    sock.on('data', (d) => chunks.push(d));
    sock.write(
      `GET /a HTTP/1.1\r\n${H}\r\nPOST /b HTTP/1.1\r\n${H}Content-Length: 1\r\n\r\nbHEAD /c HTTP/1.1\r\n${H}\r\nPOST /d HTTP/1.1\r\n${H}Content-Length: 1\r\n\r\nd`,
    );
    await expect
      .poll(
        () =>
          (
            Buffer.concat(chunks)
              .toString('latin1')
              .match(/HTTP\/1\.1 /g) ?? []
          ).length,
      )
      .toBe(4);
    await new Promise((r) => setTimeout(r, 50));
    const text = Buffer.concat(chunks).toString('latin1');
    // The HEAD answer announces the 405 body's length but carries no body: the next answer follows at once.
    const head405 = /HTTP\/1\.1 405 [^\r]*\r\n(?:[^\r]+\r\n)*\r\n/g;
    const parts = text.split(/(?=HTTP\/1\.1 )/);
    expect(parts.map((p) => Number(p.slice(9, 12)))).toEqual([405, 202, 405, 202]);
    expect(parts[2]).toMatch(head405);
    expect(parts[2]!.replace(head405, '')).toBe('');
    expect(parts[2]).toMatch(/content-length: [1-9]\d*\r\n/);
    expect(parts[0]).toMatch(/\r\nallow: POST\r\n/);
    expect(parts.some((p) => /connection: close/i.test(p))).toBe(false);
    expect(seen.map((r) => `${r.head.method} ${r.head.url}`)).toEqual([
      'GET /a',
      'POST /b',
      'HEAD /c',
      'POST /d',
    ]);
    expect(sock.destroyed).toBe(false);
  });

  it("another method with a body is the handler's to refuse; refused before the body, the connection closes", async () => {
    const { port, seen } = await start({ postOnly: true, delay: () => 30 });
    const { data, closed } = await exchange(port, [
      `DELETE /a HTTP/1.1\r\n${H}Transfer-Encoding: chunked\r\n\r\n`,
      '5\r\nhello\r\n',
    ]);
    expect(parseResponses(data).map((r) => [r.status, r.headers.connection])).toEqual([[405, 'close']]);
    expect(closed).toBe(true);
    expect(seen.map((r) => r.head.method)).toEqual(['DELETE']);
  });

  it('honours Connection: close and HTTP/1.0 without keep-alive', async () => {
    const { port } = await start();
    const a = await exchange(port, [
      `POST /a HTTP/1.1\r\n${H}Connection: close\r\nContent-Length: 0\r\n\r\n`,
    ]);
    expect(parseResponses(a.data).map((r) => [r.status, r.headers.connection])).toEqual([[202, 'close']]);
    expect(a.closed).toBe(true);
    const b = await exchange(port, [`POST /b HTTP/1.0\r\nContent-Length: 0\r\n\r\n`]);
    expect(parseResponses(b.data).map((r) => r.status)).toEqual([202]);
    expect(b.closed).toBe(true);
  });

  it('sends 100 Continue only once the handler accepted', async () => {
    const { port, seen } = await start({ delay: () => 50 });
    const sock = connect(port, '127.0.0.1');
    sockets.push(sock);
    await new Promise<void>((r) => sock.once('connect', () => r()));
    const first = new Promise<string>((r) => sock.once('data', (d) => r(d.toString('latin1'))));
    sock.write(`POST /e HTTP/1.1\r\n${H}Expect: 100-continue\r\nContent-Length: 3\r\n\r\n`);
    expect(await first).toBe('HTTP/1.1 100 Continue\r\n\r\n');
    const res = readResponses(sock, 1);
    sock.write('abc');
    expect(JSON.parse((await res)[0]!.body)).toEqual({ url: '/e', bytes: 3, text: 'abc' });
    expect(seen.length).toBe(1);
  });
});

describe.skipIf(!probe.ok)('uring backend: body caps', () => {
  it('Content-Length over the global cap → 413 and close even with the body already sent; handler never called', async () => {
    const { port, seen } = await start({ maxBodyBytes: 1000 });
    const { data, closed } = await exchange(port, [
      `POST /big HTTP/1.1\r\n${H}Content-Length: 5000\r\n\r\n${'x'.repeat(5000)}`,
    ]);
    expect(parseResponses(data).map((r) => r.status)).toEqual([413]);
    expect(closed).toBe(true);
    expect(seen).toEqual([]);
  });

  it('exactly at the cap is accepted', async () => {
    const { port } = await start({ maxBodyBytes: 1000 });
    const { data } = await exchange(port, [
      `POST /max HTTP/1.1\r\n${H}Content-Length: 1000\r\nConnection: close\r\n\r\n${'y'.repeat(1000)}`,
    ]);
    const [r] = parseResponses(data);
    expect(r!.status).toBe(202);
    expect(JSON.parse(r!.body).bytes).toBe(1000);
  });

  it('a chunked body growing past the cap → 413 and close; the sink is aborted and never ended', () =>
    chunkedPastCap({ maxBodyBytes: 1000 }));

  it('route table caps are enforced natively before the handler', async () => {
    const { server, port, seen } = await start({ maxBodyBytes: 1000 });
    server.setRoutes({ '/ingest/small': 10 });
    const over = await exchange(port, [
      `POST /ingest/small?x=1 HTTP/1.1\r\n${H}Content-Length: 11\r\n\r\n${'a'.repeat(11)}`,
    ]);
    expect(parseResponses(over.data).map((r) => r.status)).toEqual([413]);
    expect(over.closed).toBe(true);
    expect(seen).toEqual([]);
    const ok = await exchange(port, [
      `POST /ingest/small HTTP/1.1\r\n${H}Content-Length: 10\r\nConnection: close\r\n\r\n${'a'.repeat(10)}`,
    ]);
    expect(parseResponses(ok.data).map((r) => r.status)).toEqual([202]);
    const other = await exchange(port, [
      `POST /ingest/other HTTP/1.1\r\n${H}Content-Length: 500\r\nConnection: close\r\n\r\n${'a'.repeat(500)}`,
    ]);
    expect(parseResponses(other.data).map((r) => r.status)).toEqual([202]);
    expect(seen.map((s) => s.head.url)).toEqual(['/ingest/small', '/ingest/other']);
  });

  it('a route table set before listen() holds from the first request', async () => {
    const { handler, seen } = recordingHandler();
    const server = createUringServer({ handler, host: '127.0.0.1', port: 0, closeGraceMs: 100 });
    servers.push(server);
    server.setRoutes(new Map([['/ingest/early', 10]]));
    const { port } = await server.listen();
    const over = await exchange(port, [`POST /ingest/early HTTP/1.1\r\n${H}Content-Length: 11\r\n\r\n`]);
    expect(parseResponses(over.data).map((r) => r.status)).toEqual([413]);
    expect(seen).toEqual([]);
  });

  it("the sink's own smaller cap → 413 and close, body never ended", async () => {
    const { port, seen } = await start({ maxBodyBytes: 1000, sinkCap: 100 });
    const { data, closed } = await exchange(port, [
      `POST /s HTTP/1.1\r\n${H}Content-Length: 200\r\n\r\n`,
      'b'.repeat(200),
    ]);
    expect(parseResponses(data).map((r) => r.status)).toEqual([413]);
    expect(closed).toBe(true);
    expect(seen.length).toBe(1);
    expect(seen[0]!.ended).toBe(false);
    expect(seen[0]!.aborted).toBeTruthy();
    expect(Buffer.concat(seen[0]!.body).length).toBe(0);
  });
});

describe.skipIf(!probe.ok)('uring backend: bodies before and after the handler accepts', () => {
  it('a body far past the pre-accept window, sent while the handler decides, is delivered whole once accepted', async () => {
    const { port, seen } = await start({ maxBodyBytes: null, delay: () => 100 });
    const body = Buffer.alloc(300_000, 0x71);
    const { data } = await exchange(port, [
      Buffer.concat([
        Buffer.from(`POST /big HTTP/1.1\r\n${H}Content-Length: ${body.length}\r\nConnection: close\r\n\r\n`),
        body,
      ]),
    ]);
    const [r] = parseResponses(data);
    expect(r!.status).toBe(202);
    expect(JSON.parse(r!.body).bytes).toBe(300_000);
    expect(Buffer.concat(seen[0]!.body).equals(body)).toBe(true);
  });

  it('the same, chunked and refused by the handler: 405 + close, nothing handed to a sink', async () => {
    const { port, seen } = await start({ maxBodyBytes: null, postOnly: true, delay: () => 100 });
    const chunk = `8000\r\n${'c'.repeat(0x8000)}\r\n`;
    const { data, closed } = await exchange(port, [
      `PUT /x HTTP/1.1\r\n${H}Transfer-Encoding: chunked\r\n\r\n${chunk.repeat(8)}0\r\n\r\n`,
    ]);
    expect(parseResponses(data).map((r) => [r.status, r.headers.connection])).toEqual([[405, 'close']]);
    expect(closed).toBe(true);
    expect(seen.map((r) => r.body.length)).toEqual([0]);
  });

  it("with no global cap, the accepted sink's cap is enforced natively for a chunked body: 413 + close, sink aborted", () =>
    chunkedPastCap({ maxBodyBytes: null, sinkCap: 1000 }));
});

describe.skipIf(!probe.ok)('uring backend: answer deadline', () => {
  it('a complete request the handler never answers gets 503 + Retry-After and close after answerTimeoutMs; its sink is aborted', async () => {
    const { port, seen } = await start({ answerTimeoutMs: 300, hang: (h) => h.url === '/hang' });
    const t0 = Date.now();
    const { data, closed } = await exchange(
      port,
      [`POST /hang HTTP/1.1\r\n${H}Content-Length: 2\r\n\r\nhi`],
      3000,
    );
    const waited = Date.now() - t0;
    const res = parseResponses(data);
    expect(res.map((r) => [r.status, r.headers['retry-after'], r.headers.connection])).toEqual([
      [503, '1', 'close'],
    ]);
    expect(JSON.parse(res[0]!.body)).toMatchObject({ error: { code: 'unavailable' } });
    expect(closed).toBe(true);
    // Not before the deadline: the answer had its full time.
    expect(waited).toBeGreaterThanOrEqual(300);
    await expect.poll(() => seen[0]?.aborted).toBeTruthy();
    // Requests that are answered are untouched by it, on the same server.
    const ok = await exchange(port, [
      `POST /ok HTTP/1.1\r\n${H}Content-Length: 0\r\nConnection: close\r\n\r\n`,
    ]);
    expect(parseResponses(ok.data).map((r) => r.status)).toEqual([202]);
  });

  it('a handler that never decides on a body-less request is cut off the same way', async () => {
    const server = createUringServer({
      handler: { begin: () => new Promise(() => undefined) },
      host: '127.0.0.1',
      port: 0,
      answerTimeoutMs: 200,
      closeGraceMs: 100,
    });
    servers.push(server);
    const { port } = await server.listen();
    const { data, closed } = await exchange(port, [`GET /x HTTP/1.1\r\n${H}\r\n`], 3000);
    expect(parseResponses(data).map((r) => r.status)).toEqual([503]);
    expect(closed).toBe(true);
  });
});

describe.skipIf(!probe.ok)('uring backend: graceful close', () => {
  it('closes idle keep-alive connections, lets an in-flight request finish, then refuses new connections', async () => {
    const { server, port } = await start({ delay: (h) => (h.url === '/slow' ? 150 : 0) });
    const idle = connect(port, '127.0.0.1');
    sockets.push(idle);
    const idleClosed = new Promise<void>((r) => idle.once('close', () => r()));
    const first = readResponses(idle, 1);
    idle.write(`POST /warm HTTP/1.1\r\n${H}Content-Length: 0\r\n\r\n`);
    expect((await first)[0]!.status).toBe(202);

    const inflight = exchange(port, [`POST /slow HTTP/1.1\r\n${H}Content-Length: 2\r\n\r\nhi`], 3000);
    await new Promise((r) => setTimeout(r, 50));
    const t0 = Date.now();
    await server.close();
    servers.splice(servers.indexOf(server), 1);
    expect(Date.now() - t0).toBeLessThan(2000);
    await idleClosed;
    const slow = await inflight;
    expect(parseResponses(slow.data).map((r) => [r.status, JSON.parse(r.body).url])).toEqual([
      [202, '/slow'],
    ]);
    expect(slow.closed).toBe(true);
    const refused = await new Promise<string>((resolve) => {
      const s = connect(port, '127.0.0.1');
      s.once('connect', () => resolve('connected'));
      s.once('error', (e: NodeJS.ErrnoException) => resolve(e.code ?? 'error'));
    });
    expect(refused).toBe('ECONNREFUSED');
  });
});

describe.skipIf(!probe.ok)('uring backend: SO_REUSEPORT', () => {
  it('two servers share one port when reusePort is set, and not otherwise', async () => {
    const mk = (reusePort: boolean, port: number) =>
      createUringServer({
        handler: recordingHandler().handler,
        host: '127.0.0.1',
        port,
        reusePort,
        closeGraceMs: 100,
      });
    const a = mk(true, 0);
    servers.push(a);
    const { port } = await a.listen();
    const b = mk(true, port);
    servers.push(b);
    await expect(b.listen()).resolves.toEqual({ port });
    const c = mk(false, port);
    await expect(c.listen()).rejects.toMatchObject({ code: 'SPW_ERR_URING', errno: 98 });
  });
});

describe('uring backend: probe', () => {
  beforeAll(() => undefined);
  it('reports ok or a reason naming what failed', () => {
    if (probe.ok) expect(probe).toEqual({ ok: true });
    else expect(probe.reason).toMatch(/\S/);
  });
});

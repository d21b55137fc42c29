/**
 * sliceReads (packages/ingest/src/backends/h1.ts): node:http gets a connection's reads 8 KiB at a
 * time, and none once the socket is destroyed or paused, so a client pipelining thousands of
 * requests in one read makes the server parse a slice's worth, not the whole read (issue 15).
 * Real node:http servers handed real loopback sockets, the way the front door hands them.
 */
import http from 'node:http';
import net, { type AddressInfo, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { sliceReads } from '../src/backends/h1.ts';

const closers: (() => void)[] = [];
afterEach(() => {
  for (const c of closers.splice(0)) c();
});

/** A node:http server fed by a plain TCP listener, sliced or not; resolves with its port. */
async function serve(
  sliced: boolean,
  onRequest: (req: http.IncomingMessage, res: http.ServerResponse) => void,
): Promise<{ port: number; attached: boolean[] }> {
  const h1 = http.createServer(onRequest);
  const attached: boolean[] = [];
  if (sliced) h1.on('connection', (s: Socket) => attached.push(sliceReads(s)));
  const tcp = net.createServer((s) => h1.emit('connection', s));
  await new Promise<void>((r) => tcp.listen(0, '127.0.0.1', r));
  closers.push(() => tcp.close());
  return { port: (tcp.address() as AddressInfo).port, attached };
}

const GET = 'GET / HTTP/1.1\r\nHost: x\r\n\r\n';

describe('node:http reads in slices', () => {
  for (const sliced of [true, false])
    it(`${sliced ? 'sliced' : 'not sliced (the control)'}: a socket destroyed at its 128th pipelined request parses ${sliced ? 'at most one slice more' : 'the whole read'}`, async () => {
      let parsed = 0;
      const { port, attached } = await serve(sliced, (req, res) => {
        parsed++;
        if (req.socket.destroyed) return;
        if (parsed >= 128) return void req.socket.destroy();
        res.end('x');
      });
      const c = net.connect(port, '127.0.0.1');
      c.pause(); // never reads an answer
      c.on('error', () => {});
      closers.push(() => c.destroy());
      // 2,400 heads (~64 KiB) in one write.
      c.write(GET.repeat(2400));
      await new Promise((r) => setTimeout(r, 500));
      if (sliced) {
        expect(attached).toEqual([true]);
        // 128 + what one 8 KiB slice holds (~290 heads).
        expect(parsed).toBeLessThan(128 + 300);
      } else expect(parsed).toBeGreaterThan(1000);
    });

  it('sliced: pipelined requests with bodies, the socket paused and resumed between them, all answered in order, bodies intact', async () => {
    const N = 400;
    let n = 0;
    const { port } = await serve(true, (req, res) => {
      const k = n++;
      const chunks: Buffer[] = [];
      req.on('data', (d: Buffer) => chunks.push(d));
      req.on('end', () => {
        // Every 25th request pauses reading for a moment (as the handler does when answers wait).
        if (k % 25 === 0) {
          req.socket.pause();
          setTimeout(() => req.socket.resume(), 20);
        }
        res.end(`${k}:${Buffer.concat(chunks).toString()}`);
      });
    });
    const bodies = Array.from({ length: N }, (_, i) => `${i}-${'b'.repeat(i % 97)}`);
    const raw = bodies
      .map((b) => `POST / HTTP/1.1\r\nHost: x\r\nContent-Length: ${Buffer.byteLength(b)}\r\n\r\n${b}`)
      .join('');
    const c = net.connect(port, '127.0.0.1');
    closers.push(() => c.destroy());
    let text = '';
    const answers = await new Promise<string[]>((resolve, reject) => {
      c.on('error', reject);
      c.on('data', (d: Buffer) => {
        text += d.toString();
        const got = [...text.matchAll(/\r\n\r\n(\d+:[^H]*?)(?=HTTP\/1\.1|$)/g)].map((m) => m[1]!);
        if (got.length === N && text.endsWith(bodies.at(-1)!)) resolve(got);
      });
      c.write(raw);
    });
    expect(answers).toEqual(bodies.map((b, i) => `${i}:${b}`));
    expect(raw.length).toBeGreaterThan(3 * 8 * 1024);
  });
});

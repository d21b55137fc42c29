import { createHmac } from 'node:crypto';
import http from 'node:http';
import net from 'node:net';
import { createNodeServer, createPipeline, type IngestServer } from '@spillway/ingest';
import { createKeys, createLogger, type SpillwayEvent } from '@spillway/shared';
import { afterEach, describe, expect, it } from 'vitest';

/** node:http specifics the conformance suite does not cover: keep-alive, SO_REUSEPORT, header cap. */
const got: SpillwayEvent[] = [];
const pipeline = createPipeline({
  sources: {
    get: async (id) =>
      id === 'gh'
        ? { id: 'gh', tenantId: 't', kind: 'github', secret: 's', maxBodyBytes: 1 << 16, createdAt: '' }
        : undefined,
  },
  intake: {
    async submit(e) {
      got.push(e);
      return { id: e.id, duplicate: false };
    },
  },
  keys: createKeys('nb'),
  logger: createLogger('silent'),
  bodyBudgetBytes: 1 << 20,
});
const servers: IngestServer[] = [];
afterEach(async () => {
  for (const s of servers.splice(0)) await s.close();
});

const signed = (body: string, id: string) => ({
  'x-hub-signature-256': `sha256=${createHmac('sha256', 's').update(body).digest('hex')}`,
  'x-github-event': 'push',
  'x-github-delivery': id,
});

describe('createNodeServer', () => {
  it('keeps connections alive across requests, including after a refusal decided on a body-less request', async () => {
    const s = createNodeServer({ handler: pipeline, port: 0, host: '127.0.0.1' });
    servers.push(s);
    const { port } = await s.listen();
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    const sockets = new Set<unknown>();
    const call = (path: string, method: string, body?: string, headers: Record<string, string> = {}) =>
      new Promise<number>((resolve, reject) => {
        const req = http.request({ host: '127.0.0.1', port, path, method, headers, agent }, (res) => {
          res.resume();
          res.on('end', () => resolve(res.statusCode ?? 0));
        });
        req.on('socket', (sock) => sockets.add(sock));
        req.on('error', reject);
        req.end(body);
      });
    try {
      for (let i = 0; i < 3; i++)
        expect(await call('/ingest/gh', 'POST', '{}', signed('{}', `k${i}`))).toBe(202);
      expect(await call('/nope', 'GET')).toBe(404);
      expect(await call('/ingest/gh', 'POST', '{}', signed('{}', 'k9'))).toBe(202);
      expect(sockets.size).toBe(1);
    } finally {
      agent.destroy();
    }
  });

  it('reusePort lets two ingest servers bind the same port', async () => {
    const a = createNodeServer({ handler: pipeline, port: 0, host: '127.0.0.1', reusePort: true });
    servers.push(a);
    const { port } = await a.listen();
    const b = createNodeServer({ handler: pipeline, port, host: '127.0.0.1', reusePort: true });
    servers.push(b);
    expect((await b.listen()).port).toBe(port);
    const c = createNodeServer({ handler: pipeline, port, host: '127.0.0.1' });
    await expect(c.listen()).rejects.toThrow(/EADDRINUSE/);
  });

  it('headers over maxHeaderBytes get 431 and a closed connection', async () => {
    const s = createNodeServer({ handler: pipeline, port: 0, host: '127.0.0.1', maxHeaderBytes: 2048 });
    servers.push(s);
    const { port } = await s.listen();
    const sock = net.connect(port, '127.0.0.1');
    let out = '';
    sock.on('data', (d) => {
      out += d;
    });
    const closed = new Promise((r) => sock.once('close', r));
    sock.write(`POST /ingest/gh HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(4096)}\r\n\r\n`);
    await closed;
    expect(out).toMatch(/^HTTP\/1\.1 431 /);
  });
});

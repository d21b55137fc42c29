/**
 * One port, classified by its first bytes (docs/ingest.md, "One port"): curl over TLS with ALPN
 * h2 and http/1.1 and over h2c against the same port, unknown bytes closed and counted, the
 * certificate swapped without a restart, and the rapid-reset guard. Real sockets, a real curl,
 * a test CA made with openssl.
 */
import { randomBytes } from 'node:crypto';
import net from 'node:net';
import tls from 'node:tls';
import {
  createNodeServer,
  createPipeline,
  type IngestServer,
  type IngestServerOptions,
} from '@spillway/ingest';
import { createKeys, createLogger, registry, type SpillwayEvent } from '@spillway/shared';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { curlGithub } from '../../../test/helpers/github.ts';
import { CODE, rapidReset } from '../../../test/helpers/h2-frames.ts';
import { makeTestCerts, type TestCerts } from '../../../test/helpers/tls.ts';
import { createUringServer, probeUring } from '../src/backends/uring.ts';

const got: SpillwayEvent[] = [];
const pipeline = createPipeline({
  sources: {
    get: async (id) =>
      id === 'gh'
        ? {
            id: 'gh',
            tenantId: 't',
            kind: 'github',
            secret: 's',
            maxBodyBytes: 1 << 16,
            createdAt: '',
            // Only loopback: a wrong remote address behind TLS or HTTP/2 would be refused.
            allowCidrs: ['127.0.0.1/32'],
          }
        : undefined,
  },
  intake: {
    async submit(e) {
      got.push(e);
      return { id: e.id, duplicate: false };
    },
  },
  keys: createKeys('fd'),
  logger: createLogger('silent'),
  bodyBudgetBytes: 1 << 20,
  // The flood's refused streams must not turn into 429s for the other client on the same address.
  preAuthRate: { perSecond: 1e6, burst: 1e6 },
});

async function metric(name: string, labels: Record<string, string> = {}): Promise<number> {
  const m = registry.getSingleMetric(name);
  if (!m) return 0;
  let sum = 0;
  for (const v of (await m.get()).values)
    if (Object.entries(labels).every(([k, l]) => v.labels[k] === l)) sum += v.value;
  return sum;
}

let certs: TestCerts;
const servers: IngestServer[] = [];
beforeAll(() => {
  certs = makeTestCerts('first');
});
afterEach(async () => {
  for (const s of servers.splice(0)) await s.close();
});
afterAll(() => certs.remove());

async function serve(
  extra: Partial<IngestServerOptions> = {},
  backend: 'node' | 'uring' = 'node',
): Promise<{ srv: IngestServer; port: number }> {
  const opts = {
    handler: pipeline,
    port: 0,
    host: '127.0.0.1',
    tls: { cert: certs.cert, key: certs.key },
    ...extra,
  };
  const srv = backend === 'uring' ? createUringServer(opts) : createNodeServer(opts);
  servers.push(srv);
  const { port } = await srv.listen();
  return { srv, port };
}

/** curl's status code and HTTP version (`2` or `1.1`) for one signed POST (secret `s`). */
const curl = (flags: string[], url: string, id: string) => curlGithub(flags, url, 's', id);

/** Sends `bytes`, returns what came back and whether the server closed (FIN) on its own. */
function probe(port: number, bytes: Buffer): Promise<{ reply: Buffer; closed: 'fin' | 'reset' | 'open' }> {
  return new Promise((resolve) => {
    const sock = net.connect(port, '127.0.0.1');
    const chunks: Buffer[] = [];
    let closed: 'fin' | 'reset' | 'open' = 'open';
    const timer = setTimeout(() => sock.destroy(), 3000);
    sock.on('data', (d) => chunks.push(d));
    sock.on('end', () => {
      closed = 'fin';
    });
    sock.on('error', () => {
      closed = 'reset';
    });
    sock.on('close', () => {
      clearTimeout(timer);
      resolve({ reply: Buffer.concat(chunks), closed });
    });
    sock.on('connect', () => sock.write(bytes));
  });
}

describe('one port, classified by its first bytes', () => {
  // io_uring: plain HTTP/1.1 stays on the ring, the rest is handed off to the same front door.
  // (Where io_uring is blocked, test/conformance/ingest-uring.test.ts fails loudly, not this.)
  it.each(probeUring().ok ? (['node', 'uring'] as const) : (['node'] as const))(
    'curl --http2 and --http1.1 over TLS, --http2-prior-knowledge and --http1.1 in the clear all get 202 on one port (%s)',
    async (backend) => {
      const { port } = await serve({}, backend);
      const tlsArgs = ['--cacert', certs.caPath];
      const url = `https://127.0.0.1:${port}/ingest/gh`;
      const before = {
        h2: await metric('spillway_ingest_connections_total', { class: 'tls_h2' }),
        h1: await metric('spillway_ingest_connections_total', { class: 'tls_http1' }),
        h2c: await metric('spillway_ingest_connections_total', { class: 'h2c' }),
      };
      const ids = ['a', 'b', 'c', 'd'].map((x) => `${x}-${randomBytes(4).toString('hex')}`);
      expect(await curl([...tlsArgs, '--http2'], url, ids[0]!)).toBe('202 2');
      expect(await curl([...tlsArgs, '--http1.1'], url, ids[1]!)).toBe('202 1.1');
      expect(await curl(['--http2-prior-knowledge'], `http://127.0.0.1:${port}/ingest/gh`, ids[2]!)).toBe(
        '202 2',
      );
      expect(await curl(['--http1.1'], `http://127.0.0.1:${port}/ingest/gh`, ids[3]!)).toBe('202 1.1');
      expect(got.filter((e) => ids.includes(e.id)).map((e) => e.id)).toEqual(ids);
      expect(await metric('spillway_ingest_connections_total', { class: 'tls_h2' })).toBe(before.h2 + 1);
      expect(await metric('spillway_ingest_connections_total', { class: 'tls_http1' })).toBe(before.h1 + 1);
      expect(await metric('spillway_ingest_connections_total', { class: 'h2c' })).toBe(before.h2c + 1);
    },
  );

  it('an SSH banner, random bytes and a silent connection are closed with a FIN and counted by class', async () => {
    const { port } = await serve({ headersTimeoutMs: 300 });
    const before = {
      ssh: await metric('spillway_ingest_connections_total', { class: 'ssh' }),
      unknown: await metric('spillway_ingest_connections_total', { class: 'unknown' }),
      silent: await metric('spillway_ingest_connections_total', { class: 'silent' }),
    };
    const ssh = await probe(port, Buffer.from('SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n'));
    expect(ssh).toEqual({ reply: Buffer.alloc(0), closed: 'fin' });
    const junk = await probe(port, Buffer.from([0x00, 0xff, 0x13, 0x37, 0x80, 0x01, 0x02, 0x03]));
    expect(junk).toEqual({ reply: Buffer.alloc(0), closed: 'fin' });
    const silent = await probe(port, Buffer.alloc(0));
    expect(silent.closed).toBe('fin');
    expect(await metric('spillway_ingest_connections_total', { class: 'ssh' })).toBe(before.ssh + 1);
    expect(await metric('spillway_ingest_connections_total', { class: 'unknown' })).toBe(before.unknown + 1);
    expect(await metric('spillway_ingest_connections_total', { class: 'silent' })).toBe(before.silent + 1);
  });

  it('without a certificate a ClientHello is closed and counted as tls_unconfigured; HTTP/1.1 still works', async () => {
    const srv = createNodeServer({ handler: pipeline, port: 0, host: '127.0.0.1' });
    servers.push(srv);
    const { port } = await srv.listen();
    const before = await metric('spillway_ingest_connections_total', { class: 'tls_unconfigured' });
    await expect(
      curl(['--cacert', certs.caPath], `https://127.0.0.1:${port}/ingest/gh`, 'x'),
    ).rejects.toThrow();
    expect(await metric('spillway_ingest_connections_total', { class: 'tls_unconfigured' })).toBe(before + 1);
    expect(await curl([], `http://127.0.0.1:${port}/ingest/gh`, `p-${randomBytes(4).toString('hex')}`)).toBe(
      '202 1.1',
    );
  });

  it('setTlsCredentials swaps the certificate for new handshakes; one that does not load keeps the old', async () => {
    const { srv, port } = await serve();
    const cn = () =>
      new Promise<string>((resolve, reject) => {
        const s = tls.connect(
          { port, host: '127.0.0.1', ca: [certs.ca, second.ca], ALPNProtocols: ['h2'] },
          () => {
            resolve(String(s.getPeerCertificate().subject.CN));
            s.destroy();
          },
        );
        s.on('error', reject);
      });
    const second = makeTestCerts('second');
    try {
      expect(await cn()).toBe('first');
      srv.setTlsCredentials!({ cert: second.cert, key: second.key });
      expect(await cn()).toBe('second');
      expect(() => srv.setTlsCredentials!({ cert: 'not a certificate', key: second.key })).toThrow();
      expect(await cn()).toBe('second');
    } finally {
      second.remove();
    }
  });

  for (const mode of ['h2c', 'tls'] as const)
    it(`a rapid-reset flood (${mode}) is told GOAWAY ENHANCE_YOUR_CALM and closed; another client keeps getting 202`, async () => {
      const { port } = await serve({ http2: { maxResetsPerSecond: 100 } });
      const before = await metric('spillway_ingest_h2_rapid_reset_closes_total');
      const sock =
        mode === 'tls'
          ? tls.connect({ port, host: '127.0.0.1', ca: certs.ca, ALPNProtocols: ['h2'] })
          : net.connect(port, '127.0.0.1');
      await new Promise((r) => sock.once(mode === 'tls' ? 'secureConnect' : 'connect', r));
      const flood = rapidReset(sock, '/ingest/gh', mode === 'tls', { maxStreams: 20_000, ms: 8000 });
      // Meanwhile a well-behaved client on its own connection.
      const statuses: string[] = [];
      let done = false;
      void flood.then(() => {
        done = true;
      });
      while (!done && statuses.length < 20)
        statuses.push(
          await curl(
            ['--cacert', certs.caPath, '--http2'],
            `https://127.0.0.1:${port}/ingest/gh`,
            `ok-${randomBytes(4).toString('hex')}`,
          ),
        );
      const r = await flood;
      expect(r.goaway?.code).toBe(CODE.ENHANCE_YOUR_CALM);
      expect(r.closed).toBe(true);
      // nghttp2's own last resort answers INTERNAL_ERROR after ~1000 resets; this is the guard's code,
      // given at the stream past the bound (ids are odd: stream n is id 2n - 1).
      expect(r.goaway!.lastStream).toBeLessThan(2 * 2 * 100);
      expect(await metric('spillway_ingest_h2_rapid_reset_closes_total')).toBe(before + 1);
      statuses.push(
        await curl(
          ['--cacert', certs.caPath, '--http2'],
          `https://127.0.0.1:${port}/ingest/gh`,
          `after-${randomBytes(4).toString('hex')}`,
        ),
      );
      expect(new Set(statuses)).toEqual(new Set(['202 2']));
    });
});

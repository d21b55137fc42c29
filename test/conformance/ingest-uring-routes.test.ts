/**
 * The ingest role feeds its sources' body caps to the io_uring addon (IngestServer.setRoutes): a
 * POST whose Content-Length is over its source's maxBodyBytes is refused natively with 413 and never
 * reaches the pipeline. "Reached the pipeline" is read off the pipeline's own request counter
 * (spillway_ingest_requests_total{kind="github"}: the only github traffic of this process), which it
 * bumps for every request it answers.
 */
import { randomBytes } from 'node:crypto';
import net from 'node:net';
import { ConfigStore, type Started, start } from '@spillway/router';
import { registry, type Source } from '@spillway/shared';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { probeUring } from '../../packages/ingest/src/backends/uring.ts';
import { testEnv } from '../helpers/env.ts';

const probe = probeUring();

async function handled(): Promise<number> {
  const metric = registry.getSingleMetric('spillway_ingest_requests_total');
  if (!metric) return 0;
  const { values } = await metric.get();
  return values.filter((v) => v.labels.kind === 'github').reduce((a, v) => a + v.value, 0);
}

/** One raw request (head only: the body is never sent); the status of the answer, 0 if none in 3 s. */
async function status(port: number, path: string, contentLength: number): Promise<number> {
  const sock = net.connect(port, '127.0.0.1');
  sock.on('error', () => {});
  try {
    await new Promise((r) => sock.once('connect', r));
    const out = new Promise<string>((resolve) => {
      let s = '';
      sock.on('data', (d) => {
        s += d;
        if (s.includes('\r\n\r\n')) resolve(s);
      });
      sock.once('close', () => resolve(s));
      setTimeout(() => resolve(s), 3000);
    });
    sock.write(
      `POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${contentLength}\r\n\r\n`,
    );
    return Number(/^HTTP\/1\.1 (\d{3})/.exec(await out)?.[1] ?? 0);
  } finally {
    sock.destroy();
  }
}

describe.skipIf(!probe.ok)('ingest role → io_uring addon: per-source body caps', () => {
  const env = testEnv({ SPILLWAY_INGEST_BACKEND: 'uring' });
  const started: Started[] = [];
  let store: ConfigStore;
  const tenantId = `tn-${randomBytes(3).toString('hex')}`;

  const addSource = async (maxBodyBytes: number): Promise<Source> =>
    store.createSource({
      id: `src-${randomBytes(4).toString('hex')}`,
      tenantId,
      kind: 'github',
      secret: 's3cret',
      maxBodyBytes,
      createdAt: new Date().toISOString(),
    });

  beforeAll(async () => {
    started.push(await start('ingest', env));
    store = new ConfigStore(started[0]!.rt.redis, started[0]!.rt.keys, started[0]!.rt.secrets);
    await store.createTenant({
      id: tenantId,
      limits: { maxInFlight: 100, concurrency: 4 },
      status: 'active',
      createdAt: new Date().toISOString(),
    });
  });
  afterAll(async () => {
    for (const s of started.reverse()) await s.close();
  });

  it('a source created while serving: its cap reaches the addon; Content-Length cap + 1 → 413 without the pipeline', async () => {
    const sp = started[0]!;
    const src = await addSource(1000);
    const path = `/ingest/${src.id}`;
    // The table is reloaded on the change message: until then the pipeline answers the 413 itself.
    const deadline = Date.now() + 5000;
    for (;;) {
      const before = await handled();
      const s = await status(sp.ingestPort!, path, 1001);
      expect(s).toBe(413);
      if ((await handled()) === before) break;
      if (Date.now() > deadline) throw new Error('the cap never reached the addon');
      await new Promise((r) => setTimeout(r, 50));
    }
    const before = await handled();
    const over = [];
    for (let i = 0; i < 5; i++) over.push(await status(sp.ingestPort!, path, 1001));
    expect(over).toEqual([413, 413, 413, 413, 413]);
    // The trailing-slash spelling the pipeline also routes.
    expect(await status(sp.ingestPort!, `${path}/`, 1001)).toBe(413);
    expect(await handled()).toBe(before);
    // At the cap the request reaches the pipeline (no signature header: 401 decided on the head).
    expect(await status(sp.ingestPort!, path, 1000)).toBe(401);
    expect(await handled()).toBe(before + 1);
  });

  it('sources that exist before the role starts are in the table from the first request', async () => {
    const src = await addSource(2000);
    const second = await start('ingest', env);
    started.push(second);
    const before = await handled();
    expect(await status(second.ingestPort!, `/ingest/${src.id}`, 2001)).toBe(413);
    expect(await handled()).toBe(before);
  });

  it('a deleted source leaves the table: its old cap no longer answers, the pipeline does (404)', async () => {
    const sp = started[0]!;
    const src = await addSource(500);
    const path = `/ingest/${src.id}`;
    await expect
      .poll(
        async () => {
          const before = await handled();
          await status(sp.ingestPort!, path, 501);
          return (await handled()) === before;
        },
        { timeout: 5000, interval: 50 },
      )
      .toBe(true);
    await store.deleteSource(tenantId, src.id);
    // Unknown source: 404 from the pipeline once the table dropped it (the pipeline's cache is
    // invalidated by the same message).
    await expect.poll(() => status(sp.ingestPort!, path, 501), { timeout: 5000, interval: 50 }).toBe(404);
  });
});

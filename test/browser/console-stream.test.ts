import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { type Started, start } from '@spillway/router';
// The hub is internal to the admin role (not exported by the package): imported from source, as the
// benchmarks do for internals.
import { SnapshotHub } from '@spillway/router/testing';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testEnv } from '../helpers/env.ts';
import { PrivateRedis } from '../helpers/redis-server.ts';
import { dropSpillTopic } from '../helpers/router-fixtures.ts';
import { sleep, waitFor } from '../helpers/wait.ts';
import { apiClient } from './support.ts';

/**
 * The console's live numbers cost one computation per tick however many consoles are open: 20
 * overview streams over 200 tenants, on a private redis-server whose INFO commandstats counts the
 * reads. Each snapshot reads every tenant's DLQ length once (LLEN), so with one shared producer the
 * LLEN calls are ≈ ticks × tenants; one producer per console would make them ≈ 20 × that.
 */
const TENANTS = 1000;
const CONSOLES = 20;

let redis: PrivateRedis;
let admin: Started;
let env: Record<string, string>;
let probe: Redis;

beforeAll(async () => {
  redis = new PrivateRedis(0, { aof: 'always' });
  await redis.start();
  env = testEnv({ SPILLWAY_REDIS_URL: redis.url });
  admin = await start('admin', env);
  probe = new Redis(redis.url);
}, 60_000);

afterAll(async () => {
  probe?.disconnect();
  await admin?.close();
  await redis?.destroy();
  if (env) await dropSpillTopic(env.SPILLWAY_KAFKA_BROKERS!.split(','), env.SPILLWAY_SPILL_TOPIC!);
});

async function llenCalls(): Promise<number> {
  const info = await probe.info('commandstats');
  return Number(/cmdstat_llen:calls=(\d+)/.exec(info)?.[1] ?? 0);
}

/** Reads an SSE response, collecting the `snapshot` frames' JSON. */
async function collect(res: Response, frames: unknown[], stopAt: () => boolean): Promise<void> {
  const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  while (!stopAt()) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += value;
    for (let i = buf.indexOf('\n\n'); i >= 0; i = buf.indexOf('\n\n')) {
      const block = buf.slice(0, i);
      buf = buf.slice(i + 2);
      if (block.startsWith('event: snapshot\n'))
        frames.push(JSON.parse(block.slice(block.indexOf('data: ') + 6)));
    }
  }
  await reader.cancel();
}

describe('console overview stream', { timeout: 120_000 }, () => {
  it(`${CONSOLES} open consoles over ${TENANTS} tenants share one snapshot per tick`, async () => {
    const base = `http://127.0.0.1:${admin.adminPort}`;
    const api = apiClient(base, env.SPILLWAY_ADMIN_TOKEN!);
    for (let i = 0; i < TENANTS; i += 50) {
      const batch = Array.from({ length: 50 }, (_, k) => `t${String(i + k).padStart(3, '0')}`);
      const res = await Promise.all(batch.map((id) => api('POST', '/v1/tenants', { id })));
      for (const r of res) expect(r.status).toBe(201);
    }

    const before = await llenCalls();
    const frames: unknown[][] = Array.from({ length: CONSOLES }, () => []);
    const deadline = Date.now() + 4_000;
    await Promise.all(
      frames.map(async (f) => {
        const res = await fetch(`${base}/console/api/stream`, {
          headers: { authorization: `Bearer ${env.SPILLWAY_ADMIN_TOKEN}` },
        });
        expect(res.status).toBe(200);
        expect(res.headers.get('content-type')).toContain('text/event-stream');
        await collect(res, f, () => Date.now() > deadline);
      }),
    );
    // Deliberate window: let the producer notice the last subscriber left, then count.
    await sleep(1500);
    const llen = (await llenCalls()) - before;

    const counts = frames.map((f) => f.length);
    // About one frame a second for every console (4 s, ±1 for where the ticks fell).
    for (const n of counts) expect(n).toBeGreaterThanOrEqual(3);
    const snap = frames[0]![frames[0]!.length - 1] as { tenants: { id: string; status: string }[] };
    expect(snap.tenants).toHaveLength(TENANTS);
    expect(snap.tenants[0]).toMatchObject({ id: 't000', status: 'active' });

    // Ticks computed = LLEN calls / tenants. Shared: about as many as one console received (+1 for
    // a tick that ran while the last streams were closing). Per console it would be ~CONSOLES × that.
    const ticks = llen / TENANTS;
    expect(Number.isInteger(ticks)).toBe(true);
    expect(ticks).toBeGreaterThanOrEqual(Math.min(...counts) - 1);
    expect(ticks).toBeLessThanOrEqual(Math.max(...counts) + 2);
  });

  it('refuses a stream without a token, or for an unknown tenant, in the API words', async () => {
    const base = `http://127.0.0.1:${admin.adminPort}`;
    const none = await fetch(`${base}/console/api/stream`);
    expect(none.status).toBe(401);
    expect(await none.json()).toEqual({
      error: { code: 'unauthorized', message: 'missing Authorization: Bearer <token>' },
    });
    const unknown = await fetch(`${base}/console/api/tenants/nope/stream`, {
      headers: { authorization: `Bearer ${env.SPILLWAY_ADMIN_TOKEN}` },
    });
    expect(unknown.status).toBe(404);
    expect(await unknown.json()).toEqual({ error: { code: 'not_found', message: 'tenant nope not found' } });
  });

  it('an open stream does not hold up shutdown: closing the server ends it', async () => {
    const base = `http://127.0.0.1:${admin.adminPort}`;
    const api = apiClient(base, env.SPILLWAY_ADMIN_TOKEN!);
    expect((await api('POST', '/v1/tenants', { id: 'closing' })).status).toBe(201);
    const res = await fetch(`${base}/console/api/tenants/closing/stream`, {
      headers: { authorization: `Bearer ${env.SPILLWAY_ADMIN_TOKEN}` },
    });
    expect(res.status).toBe(200);
    const frames: unknown[] = [];
    const reading = collect(res, frames, () => false);
    await waitFor(() => frames.length > 0, 'a first snapshot', 10_000);
    expect(frames[0]).toMatchObject({ id: 'closing', status: 'active', dlq: 0 });
    // Without the hub's preClose hook, server.close() would wait for this response forever.
    await admin.close();
    await reading; // the stream ended (done), it was not left hanging
  });
});

describe('SnapshotHub', () => {
  it('ends each stream after maxAgeMs (so the console re-authenticates), and stops producing when none is left', async () => {
    const hub = new SnapshotHub({ periodMs: 50, maxAgeMs: 400 });
    let produced = 0;
    const server = createServer((_req, res) => hub.subscribe('t', res, async () => ({ n: ++produced })));
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    try {
      const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
      const frames: unknown[][] = [[], [], []];
      // Each read loop returns only when the server ends the stream (done), never by itself.
      await Promise.all(frames.map(async (f) => collect(await fetch(url), f, () => false)));
      for (const f of frames) expect(f.length).toBeGreaterThan(0);
      // Three subscribers, one producer: fewer snapshots made than sent (one per subscriber each would
      // make them equal), and the same snapshots reached different subscribers.
      expect(produced).toBeLessThan(frames.flat().length);
      const seen0 = new Set(frames[0]!.map((x) => (x as { n: number }).n));
      expect(frames[1]!.some((x) => seen0.has((x as { n: number }).n))).toBe(true);
      const after = produced;
      await sleep(300); // deliberate: no subscriber left, so (almost) nothing more is produced
      expect(produced - after).toBeLessThanOrEqual(1);
    } finally {
      hub.close();
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
    }
  });
});

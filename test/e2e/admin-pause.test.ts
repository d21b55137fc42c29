import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { type Started, start } from '@spillway/router';
import { afterAll, describe, expect, it } from 'vitest';
import { testEnv } from '../helpers/env.ts';
import { dropSpillTopic } from '../helpers/router-fixtures.ts';
import { type Spawned, spawnSpillway } from '../helpers/spawn.ts';
import { sleep, waitFor } from '../helpers/wait.ts';

/**
 * Pause/resume through the admin API reach every worker within 1 s: two `spillway start --role
 * worker` processes deliver one tenant's events to a loopback receiver; after POST .../pause no
 * request reaches the receiver later than 1 s, and after POST .../resume the first arrives within 1 s.
 */
const EVENTS = 1000;

const cleanup: (() => Promise<void>)[] = [];
afterAll(async () => {
  for (const c of cleanup.splice(0).reverse()) await c().catch(() => {});
});

describe('pause/resume across two workers', () => {
  it('takes effect on both workers within 1 s, and everything is delivered after resume', {
    timeout: 120_000,
  }, async () => {
    const arrivals: { at: number; id: string }[] = [];
    const receiver = http.createServer((req, res) => {
      arrivals.push({ at: Date.now(), id: String(req.headers['webhook-id']) });
      req.resume();
      // Slow enough that the backlog lasts several seconds at 2 workers × concurrency 2.
      setTimeout(() => res.end(), 20);
    });
    await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
    cleanup.push(() => new Promise((r) => receiver.close(() => r())));

    const env = testEnv({ SPILLWAY_TARGET_ALLOW_CIDRS: '127.0.0.1/32', SPILLWAY_RETRY_SCHEDULE: '200ms' });
    const admin: Started = await start('admin', env);
    cleanup.push(async () => {
      await admin.close();
      await dropSpillTopic(env.SPILLWAY_KAFKA_BROKERS!.split(','), env.SPILLWAY_SPILL_TOPIC!);
    });
    const workers: Spawned[] = [
      spawnSpillway(['start', '--role', 'worker'], env),
      spawnSpillway(['start', '--role', 'worker'], env),
    ];
    for (const w of workers) {
      cleanup.push(async () => {
        w.child.kill('SIGTERM');
        await w.exited;
      });
    }
    for (const w of workers)
      await waitFor(
        () => w.stdout().includes('spillway worker running'),
        `a worker up (${w.stderr()})`,
        30_000,
      );

    const base = `http://127.0.0.1:${admin.adminPort}`;
    const call = async (method: string, path: string, body?: unknown) => {
      const res = await fetch(base + path, {
        method,
        headers: {
          authorization: `Bearer ${env.SPILLWAY_ADMIN_TOKEN}`,
          ...(body === undefined ? {} : { 'content-type': 'application/json' }),
        },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      return { status: res.status, body: (await res.json()) as any };
    };
    const tid = 'pause-me';
    // maxInFlight 20: whichever worker's BullMQ fetch wins the intake jobs keeps only 20 tasks in
    // memory and spills the rest, which the drainers of both workers (one consumer group) share —
    // so both deliver, however the jobs were split.
    expect(
      (await call('POST', '/v1/tenants', { id: tid, limits: { concurrency: 2, maxInFlight: 20 } })).status,
    ).toBe(201);
    const port = (receiver.address() as AddressInfo).port;
    expect(
      (await call('POST', `/v1/tenants/${tid}/endpoints`, { id: 'ep', url: `http://127.0.0.1:${port}/hook` }))
        .status,
    ).toBe(201);
    for (let i = 0; i < EVENTS; i += 50) {
      const batch = Array.from({ length: Math.min(50, EVENTS - i) }, (_, j) =>
        call('POST', `/v1/tenants/${tid}/events`, {
          id: `p${i + j}`,
          type: 'order.created',
          payload: { n: i + j },
        }),
      );
      for (const r of await Promise.all(batch)) expect(r.status).toBe(202);
    }

    // Both workers are delivering before the pause (their published counters say so).
    await waitFor(
      async () => {
        const s = await call('GET', `/v1/tenants/${tid}/stats?detail=workers`);
        return (
          s.body.workers?.length === 2 && s.body.workers.every((w: { delivered: number }) => w.delivered > 0)
        );
      },
      'both workers delivering',
      30_000,
      100,
    );
    expect(new Set(arrivals.map((a) => a.id)).size).toBeLessThan(EVENTS * 0.7);

    const paused = await call('POST', `/v1/tenants/${tid}/pause`);
    expect(paused.body).toEqual({ id: tid, status: 'paused' });
    const pausedAt = Date.now();
    // Deliberate window: deliveries must stop (the 1 s bound is measured from the arrivals' times).
    await sleep(2500);
    const afterPause = arrivals.filter((a) => a.at > pausedAt);
    const lastArrival = Math.max(pausedAt, ...afterPause.map((a) => a.at));
    const pauseLatencyMs = lastArrival - pausedAt;
    expect(pauseLatencyMs).toBeLessThanOrEqual(1000);
    const deliveredWhilePaused = new Set(arrivals.map((a) => a.id)).size;
    expect(deliveredWhilePaused).toBeLessThan(EVENTS);

    const resumed = await call('POST', `/v1/tenants/${tid}/resume`);
    expect(resumed.body).toEqual({ id: tid, status: 'active' });
    const resumedAt = Date.now();
    const first = await waitFor(
      () => arrivals.find((a) => a.at >= resumedAt),
      'a delivery after resume',
      5_000,
      10,
    );
    const resumeLatencyMs = first!.at - resumedAt;
    expect(resumeLatencyMs).toBeLessThanOrEqual(1000);

    await waitFor(
      () => new Set(arrivals.map((a) => a.id)).size === EVENTS,
      'every event delivered after resume',
      60_000,
      100,
    );
    process.stdout.write(
      `admin-pause: pause reached both workers in ≤ ${pauseLatencyMs} ms, resume in ${resumeLatencyMs} ms\n`,
    );
  });
});

import { afterEach, describe, expect, it } from 'vitest';
import { PrivateKafka } from '../helpers/kafka-broker.ts';
import { PrivateRedis } from '../helpers/redis-server.ts';
import { makeEndpoint, makeEvent, makeTenant, routerHarness } from '../helpers/router-fixtures.ts';
import { sleep, waitFor } from '../helpers/wait.ts';

const cleanup: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c().catch(() => {});
});

/** Submits ids in slices of 20 until `stop()`; only the ones answered without error count as accepted. */
function sender(submit: (id: string) => Promise<unknown>, total: number) {
  const accepted: string[] = [];
  let rejected = 0;
  const done = (async () => {
    for (let i = 0; i < total; i += 20) {
      const ids = Array.from({ length: 20 }, (_, k) => `r${i + k}`);
      const res = await Promise.allSettled(ids.map(submit));
      res.forEach((x, k) => {
        if (x.status === 'fulfilled') accepted.push(ids[k]!);
        else rejected++;
      });
      await sleep(20); // pacing: a steady stream, not one burst
    }
  })();
  return { accepted, done, rejected: () => rejected };
}

async function world(env: Record<string, string>) {
  const h = await routerHarness(cleanup, env);
  const r = await h.receiver(() => ({ status: 200, delayMs: 10 }));
  const t = await makeTenant(h.store, { maxInFlight: 10, concurrency: 10 });
  await makeEndpoint(h.store, t.id, r.url);
  const worker = await h.worker();
  return { services: h.services, r, t, worker };
}

describe('restarts of the backing services (no process restart)', () => {
  it('Redis (AOF) restarts mid-run: the worker recovers by itself and every accepted event is delivered', {
    timeout: 150_000,
  }, async () => {
    const redis = new PrivateRedis(0, { aof: 'always' });
    await redis.start();
    cleanup.push(() => redis.destroy());
    const w = await world({ SPILLWAY_REDIS_URL: redis.url });
    const s = sender((id) => w.services.intake.submit(makeEvent(w.t.id, id)), 1200);
    await waitFor(() => w.r.got.size >= 200, 'deliveries before the restart', 60_000);
    await redis.stop();
    // Redis stays down until the intake has refused submissions (503 while down).
    await waitFor(() => s.rejected() > 0, 'a submission refused while Redis is down', 30_000);
    await redis.start();
    await s.done;
    await waitFor(
      () => s.accepted.every((id) => w.r.got.has(id)),
      'every accepted id delivered after the restart',
      100_000,
      200,
    );
    console.log(
      `redis restart: accepted ${s.accepted.length}, rejected ${s.rejected()} (503 while down), delivered ${w.r.got.size}`,
    );
    expect(s.accepted.length).toBeGreaterThan(200);
    expect(s.rejected()).toBeGreaterThan(0);
  });

  it('the Kafka broker restarts while tasks are spilled: the worker recovers by itself and every accepted event is delivered', {
    timeout: 240_000,
  }, async () => {
    const kafka = new PrivateKafka();
    await kafka.start();
    cleanup.push(() => kafka.destroy());
    const w = await world({ SPILLWAY_KAFKA_BROKERS: kafka.brokers });
    const s = sender((id) => w.services.intake.submit(makeEvent(w.t.id, id)), 1000);
    await waitFor(
      () => w.worker.spill.sent > 100 && w.r.got.size >= 100,
      'spilled tasks and deliveries',
      60_000,
    );
    await kafka.stop();
    // The broker stays down while 100 more events are accepted: they must wait for it to return.
    const acceptedAtStop = s.accepted.length;
    await waitFor(
      () => s.accepted.length >= Math.min(1000, acceptedAtStop + 100),
      'events accepted while the broker is down',
      30_000,
    );
    await kafka.start();
    await s.done;
    await waitFor(
      () => s.accepted.every((id) => w.r.got.has(id)),
      'every accepted id delivered after the broker restart',
      150_000,
      200,
    );
    console.log(`kafka restart: accepted ${s.accepted.length}, delivered ${w.r.got.size}`);
    expect(s.accepted.length).toBe(1000);
  });
});

import { randomBytes } from 'node:crypto';
import { readEvent } from '@spillway/router/testing';
import { isSpillwayError } from '@spillway/shared';
import { Queue } from 'bullmq';
import { afterEach, describe, expect, it } from 'vitest';
import { testConfig } from '../../../test/helpers/env.ts';
import { makeEvent, routerRuntime } from '../../../test/helpers/router-fixtures.ts';
import { createIntake, createRuntime, type Runtime } from '../src/index.ts';

const cleanup: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

/** An intake on a fresh runtime, both closed after the test. */
function intakeOn(overrides: Record<string, string> = {}) {
  const rt = routerRuntime(overrides);
  const intake = createIntake(rt);
  cleanup.push(async () => {
    await intake.close();
    await rt.close();
  });
  return { rt, intake };
}

async function jobsIn(rt: Runtime): Promise<{ count: number; events: number }> {
  const q = new Queue(rt.keys.intakeQueue, { connection: rt.redis as never, prefix: rt.keys.bullPrefix });
  const jobs = await q.getJobs(['wait', 'active', 'delayed', 'completed']);
  await q.close();
  return {
    count: jobs.length,
    events: jobs.reduce((n, j) => n + (j.data as { events: unknown[] }).events.length, 0),
  };
}

describe('durable intake', () => {
  it('group-commits concurrent submits into one BullMQ job and answers each after it is durable', async () => {
    const { rt, intake } = intakeOn({ SPILLWAY_GROUP_COMMIT: '20ms' });
    const results = await Promise.all(
      Array.from({ length: 50 }, (_, i) => intake.submit(makeEvent('acme', `e${i}`))),
    );
    expect(results.every((r) => r.duplicate === false)).toBe(true);
    expect(await jobsIn(rt)).toEqual({ count: 1, events: 50 });
  });

  it('an accepted event is readable at once (GET right after the 202 finds it, deliveries pending fan-out)', async () => {
    const { rt, intake } = intakeOn();
    const ev = makeEvent('acme', 'readable');
    expect(await readEvent(rt.redis, rt.keys, 'acme', 'readable')).toBeUndefined();
    await intake.submit(ev);
    const view = await readEvent(rt.redis, rt.keys, 'acme', 'readable');
    expect(view).toMatchObject({
      id: 'readable',
      type: ev.type,
      receivedAt: new Date(ev.receivedAt).toISOString(),
      deliveries: [],
    });
  });

  it('two concurrent submits of one id: exactly one accepted and one duplicate; later ones are duplicates too', async () => {
    const { rt, intake } = intakeOn();
    const [a, b] = await Promise.all([
      intake.submit(makeEvent('acme', 'same')),
      intake.submit(makeEvent('acme', 'same')),
    ]);
    expect([a.duplicate, b.duplicate].sort()).toEqual([false, true]);
    expect((await intake.submit(makeEvent('acme', 'same'))).duplicate).toBe(true);
    // Another tenant may use the same id.
    expect((await intake.submit(makeEvent('other', 'same'))).duplicate).toBe(false);
    expect((await jobsIn(rt)).events).toBe(2);
  });

  it('two intakes (two processes) racing on one id: exactly one accepted, the other sees a duplicate', async () => {
    const config = testConfig();
    const rt1 = createRuntime(config);
    const rt2 = createRuntime(config);
    const i1 = createIntake(rt1);
    const i2 = createIntake(rt2);
    cleanup.push(async () => {
      await Promise.all([i1.close(), i2.close()]);
      await Promise.all([rt1.close(), rt2.close()]);
    });
    let accepted = 0;
    for (let n = 0; n < 20; n++) {
      const id = `race-${n}`;
      const rs = await Promise.allSettled([
        i1.submit(makeEvent('acme', id)),
        i2.submit(makeEvent('acme', id)),
      ]);
      const ok = rs
        .filter((r) => r.status === 'fulfilled')
        .map((r) => (r as PromiseFulfilledResult<{ duplicate: boolean }>).value);
      // Never two acceptances; a loser either waited and saw "duplicate" or was told 503 to retry.
      expect(ok.filter((r) => !r.duplicate)).toHaveLength(1);
      for (const r of rs)
        if (r.status === 'rejected') expect(isSpillwayError(r.reason, 'SPW_ERR_UNAVAILABLE')).toBe(true);
      accepted++;
    }
    expect((await jobsIn(rt1)).events).toBe(accepted);
  });

  it('Redis down: every caller in the batch rejects with SPW_ERR_UNAVAILABLE and Retry-After', async () => {
    const { intake } = intakeOn({ SPILLWAY_REDIS_URL: 'redis://127.0.0.1:1' });
    const rs = await Promise.allSettled([
      intake.submit(makeEvent('acme', 'x1')),
      intake.submit(makeEvent('acme', 'x2')),
    ]);
    for (const r of rs) {
      expect(r.status).toBe('rejected');
      const err = (r as PromiseRejectedResult).reason;
      expect(isSpillwayError(err, 'SPW_ERR_UNAVAILABLE')).toBe(true);
      expect(err.status).toBe(503);
      expect(err.retryAfter).toBe(1);
    }
  });

  it('an accepted id is marked done for the full window; a pending marker of another process gets 503, never a false duplicate', async () => {
    const { rt, intake } = intakeOn();
    const id = `m-${randomBytes(3).toString('hex')}`;
    await intake.submit(makeEvent('acme', id));
    expect(await rt.redis.get(rt.keys.dedup('acme', id))).toBe('d');
    expect(await rt.redis.pttl(rt.keys.dedup('acme', id))).toBeGreaterThan(60_000);

    // Another process reserved this id and has not made it durable (yet, or ever).
    const other = `o-${randomBytes(3).toString('hex')}`;
    await rt.redis.set(rt.keys.dedup('acme', other), 'p:someone-else', 'PX', 30_000);
    const err = await intake.submit(makeEvent('acme', other)).catch((e: unknown) => e);
    expect(isSpillwayError(err, 'SPW_ERR_UNAVAILABLE')).toBe(true);
    // Its commit failed and released the marker: the client's retry is accepted.
    await rt.redis.del(rt.keys.dedup('acme', other));
    expect(await intake.submit(makeEvent('acme', other))).toEqual({ id: other, duplicate: false });
  });
});

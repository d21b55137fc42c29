import { randomBytes } from 'node:crypto';
import { fingerprint } from '@spillway/router/testing';
import { isSpillwayError } from '@spillway/shared';
import { Queue } from 'bullmq';
import { afterEach, describe, expect, it } from 'vitest';
import { testConfig } from '../../../test/helpers/env.ts';
import { startPrivateRedis } from '../../../test/helpers/redis-server.ts';
import { makeEvent, routerRuntime } from '../../../test/helpers/router-fixtures.ts';
import { waitFor } from '../../../test/helpers/wait.ts';
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

/**
 * A private redis-server replicating `masterPort`, in sync on both sides (the master lists it as
 * online, so ROLE counts it); its pid (to SIGSTOP it).
 */
async function replicaOf(masterPort: number): Promise<number> {
  const replica = await startPrivateRedis({ aof: 'off' });
  cleanup.push(() => replica.destroy());
  const { Redis } = await import('ioredis');
  const r = new Redis(replica.url);
  const m = new Redis(masterPort, '127.0.0.1');
  cleanup.push(async () => {
    r.disconnect();
    m.disconnect();
  });
  await r.replicaof('127.0.0.1', masterPort);
  await waitFor(
    async () =>
      (await r.info('replication')).includes('master_link_status:up') &&
      (await m.info('replication')).includes('state=online'),
    'replica in sync',
    20_000,
  );
  return Number(/process_id:(\d+)/.exec(await r.info('server'))?.[1]);
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

  it('an accepted id is kept as an 8-byte fingerprint in a slot bucket, not as a key of its own', async () => {
    const { rt, intake } = intakeOn();
    const tenant = `fp-${randomBytes(3).toString('hex')}`;
    for (let i = 0; i < 300; i++) await intake.submit(makeEvent(tenant, `f${i}`));
    const base = rt.keys.dedupBase(tenant);
    const all = await rt.redis.keys(`${base}:*`);
    const buckets = all.filter((k) => /:\d+:\d+:\d+$/.test(k));
    const markers = all.filter((k) => k.startsWith(`${base}:p:`));
    let bytes = 0;
    for (const k of buckets) bytes += (await rt.redis.getBuffer(k))!.length;
    expect(bytes).toBe(300 * 8);
    // The only per-id keys are the "just accepted" markers, and they live for a minute.
    expect(markers).toHaveLength(300);
    for (const k of markers.slice(0, 20)) expect(await rt.redis.pttl(k)).toBeLessThanOrEqual(60_000);
    // Once the markers are gone, the fingerprints alone answer "duplicate".
    await rt.redis.del(...markers);
    expect(await intake.submit(makeEvent(tenant, 'f7'))).toEqual({ id: 'f7', duplicate: true });
    expect(await intake.submit(makeEvent(tenant, 'new-one'))).toEqual({ id: 'new-one', duplicate: false });
  });

  it('dedupKey: events are deduplicated on it, not on their id; the gate is asked only for an event that is not a duplicate', async () => {
    const { intake } = intakeOn({});
    const tenant = `dk-${randomBytes(3).toString('hex')}`;
    let asked = 0;
    const gate = () => {
      asked++;
      return Promise.resolve(true);
    };
    const sub = (id: string, dedupKey?: string) =>
      intake.submit(makeEvent(tenant, id), dedupKey === undefined ? { gate } : { gate, dedupKey });
    expect(await sub('k-1', 'b:x')).toEqual({ id: 'k-1', duplicate: false });
    // Another id, the same key: a duplicate, answered under its own id.
    expect(await sub('k-2', 'b:x')).toEqual({ id: 'k-2', duplicate: true });
    // Two at once in one process: one event.
    const both = await Promise.all([sub('k-3', 'b:y'), sub('k-4', 'b:y')]);
    expect(both).toEqual([
      { id: 'k-3', duplicate: false },
      { id: 'k-4', duplicate: true },
    ]);
    // The id alone was never a key.
    expect(await sub('k-1')).toEqual({ id: 'k-1', duplicate: false });
    // b:x, b:y and k-1: the duplicates asked nothing.
    expect(asked).toBe(3);
  });

  it('a gate that says no withdraws its event: nothing added, its id free again; the rest of the batch commits', async () => {
    const { rt, intake } = intakeOn({ SPILLWAY_GROUP_COMMIT: '20ms' });
    const tenant = `gate-${randomBytes(3).toString('hex')}`;
    let decide!: (go: boolean) => void;
    const late = new Promise<boolean>((r) => {
      decide = r;
    });
    const withdrawn = intake.submit(makeEvent(tenant, 'g-no'), { gate: () => late });
    const refused = intake.submit(makeEvent(tenant, 'g-throws'), {
      gate: () => Promise.reject(new Error('x')),
    });
    const others = [
      intake.submit(makeEvent(tenant, 'g-yes'), { gate: () => Promise.resolve(true) }),
      intake.submit(makeEvent(tenant, 'g-none')),
    ];
    // The commit waits for the undecided gate: nothing is added before it says.
    await new Promise((r) => setTimeout(r, 200));
    expect((await jobsIn(rt)).count).toBe(0);
    decide(false);
    expect(await withdrawn).toEqual({ id: 'g-no', duplicate: false, withdrawn: true });
    expect(await refused).toEqual({ id: 'g-throws', duplicate: false, withdrawn: true });
    expect(await Promise.all(others)).toEqual([
      { id: 'g-yes', duplicate: false },
      { id: 'g-none', duplicate: false },
    ]);
    expect(await jobsIn(rt)).toEqual({ count: 1, events: 2 });
    // The withdrawn ids hold no marker: submitted again, each is accepted (not a duplicate, no 503).
    await waitFor(
      async () =>
        (await rt.redis.exists(`${rt.keys.dedupBase(tenant)}:p:${fingerprint('g-no').dedup}`)) === 0,
      'the withdrawn marker released',
    );
    expect(await intake.submit(makeEvent(tenant, 'g-no'))).toEqual({ id: 'g-no', duplicate: false });
    expect(await intake.submit(makeEvent(tenant, 'g-yes'))).toEqual({ id: 'g-yes', duplicate: true });
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
    const marker = (eid: string) => `${rt.keys.dedupBase('acme')}:p:${fingerprint(eid).dedup}`;
    expect(await rt.redis.get(marker(id))).toBe('d');
    // The window is the fingerprint buckets' TTL (the window plus one slot).
    const buckets = (await rt.redis.keys(`${rt.keys.dedupBase('acme')}:*`)).filter((k) =>
      /:\d+:\d+:\d+$/.test(k),
    );
    expect(Math.min(...(await Promise.all(buckets.map((k) => rt.redis.pttl(k)))))).toBeGreaterThan(
      86_400_000,
    );

    // Another process reserved this id and has not made it durable (yet, or ever).
    const other = `o-${randomBytes(3).toString('hex')}`;
    await rt.redis.set(marker(other), 'p:someone-else', 'PX', 30_000);
    const err = await intake.submit(makeEvent('acme', other)).catch((e: unknown) => e);
    expect(isSpillwayError(err, 'SPW_ERR_UNAVAILABLE')).toBe(true);
    // Its commit failed and released the marker: the client's retry is accepted.
    await rt.redis.del(marker(other));
    expect(await intake.submit(makeEvent('acme', other))).toEqual({ id: other, duplicate: false });
  });

  it('SPILLWAY_REDIS_WAIT_REPLICAS: a commit waits for a connected replica; one that does not confirm answers 503 and releases its markers', async () => {
    const master = await startPrivateRedis({ aof: 'off' });
    cleanup.push(() => master.destroy());
    const { rt, intake } = intakeOn({
      SPILLWAY_REDIS_URL: master.url,
      SPILLWAY_REDIS_WAIT_REPLICAS: '1',
      SPILLWAY_REDIS_WAIT_TIMEOUT: '50ms',
    });
    // No replica connected: nothing to wait for, accepted as on a standalone Redis.
    expect(await intake.submit(makeEvent('acme', 'w0'))).toEqual({ id: 'w0', duplicate: false });

    const pid = await replicaOf(master.port);
    // The replica count is cached for a second: let the intake see the replica.
    await waitFor(
      async () => (await intake.submit(makeEvent('acme', `w1-${Date.now()}`)).catch(() => null)) !== null,
      'a confirmed commit',
      5_000,
    );
    await new Promise((res) => setTimeout(res, 1100));
    expect(await intake.submit(makeEvent('acme', 'w1'))).toEqual({ id: 'w1', duplicate: false });
    expect(await rt.redis.get(`${rt.keys.dedupBase('acme')}:p:${fingerprint('w1').dedup}`)).toBe('d');

    // The replica stops answering (still connected): the commit is on the master only → 503.
    process.kill(pid, 'SIGSTOP');
    cleanup.push(async () => void process.kill(pid, 'SIGCONT'));
    const err = await intake.submit(makeEvent('acme', 'w2')).catch((e: unknown) => e);
    expect(isSpillwayError(err, 'SPW_ERR_UNAVAILABLE')).toBe(true);
    expect((err as { retryAfter?: number }).retryAfter).toBe(1);
    // Its marker was released, not promoted: the provider's retry is not answered "duplicate".
    expect(await rt.redis.get(`${rt.keys.dedupBase('acme')}:p:${fingerprint('w2').dedup}`)).toBeNull();
    process.kill(pid, 'SIGCONT');
    expect(await intake.submit(makeEvent('acme', 'w2'))).toEqual({ id: 'w2', duplicate: false });
  });
  it('a commit whose replicas are still being asked when the commit times out answers 503, never 202 (a master killed between its add and its WAIT)', async () => {
    const master = await startPrivateRedis({ aof: 'off' });
    cleanup.push(() => master.destroy());
    const pid = await replicaOf(master.port);
    // WAIT may take longer than the commit's 3 s: the commit times out while it is being asked.
    const { rt, intake } = intakeOn({
      SPILLWAY_REDIS_URL: master.url,
      SPILLWAY_REDIS_WAIT_REPLICAS: '1',
      SPILLWAY_REDIS_WAIT_TIMEOUT: '6s',
    });
    expect(await intake.submit(makeEvent('acme', 't0'))).toEqual({ id: 't0', duplicate: false });
    process.kill(pid, 'SIGSTOP');
    cleanup.push(async () => void process.kill(pid, 'SIGCONT'));
    const err = await intake.submit(makeEvent('acme', 't1')).catch((e: unknown) => e);
    // The job was added to the master, and nothing confirmed it: not durable, so not accepted.
    expect(isSpillwayError(err, 'SPW_ERR_UNAVAILABLE')).toBe(true);
    expect(await rt.redis.get(`${rt.keys.dedupBase('acme')}:p:${fingerprint('t1').dedup}`)).toBeNull();
    process.kill(pid, 'SIGCONT');
  }, 30_000);
});

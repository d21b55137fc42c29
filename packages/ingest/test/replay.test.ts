import { createHash, randomBytes } from 'node:crypto';
import { createRedisReplayGuard } from '@spillway/ingest';
import { createKeys, createRedis, type RedisClient } from '@spillway/shared';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testConfig } from '../../../test/helpers/env.ts';
import { claimSlots } from '../src/replay.ts';

// The body-claim guard (replay.ts, commands/body-claim-1.lua) on a real Redis.
const config = testConfig();
const keys = createKeys(config.prefix);
const WINDOW = 60_000; // one-minute slots: 1 earlier slot, keys kept 2 minutes
let redis: RedisClient;
let other: RedisClient;

beforeAll(() => {
  redis = createRedis(config.redis);
  other = createRedis(config.redis);
});
afterAll(() => {
  redis.disconnect();
  other.disconnect();
});

const id = () => randomBytes(8).toString('hex');
const sha = (s: string) => createHash('sha256').update(s).digest('hex');
const tenant = () => `t${randomBytes(3).toString('hex')}`;

async function claimKeys(t: string): Promise<string[]> {
  const found: string[] = [];
  let cursor = '0';
  do {
    const [next, batch] = await redis.scan(cursor, 'MATCH', `${keys.bodyClaim(t)}:*`, 'COUNT', 1000);
    cursor = next;
    found.push(...batch);
  } while (cursor !== '0');
  return found;
}

describe('body claims (createRedisReplayGuard)', () => {
  it('the first id owns a body: the same id passes, another id is refused, other bodies and sources pass', async () => {
    const t = tenant();
    const guard = createRedisReplayGuard(redis, keys, WINDOW);
    const body = sha(`a-${id()}`);
    const first = id();
    expect(await guard.claim(t, 'src1', body, first)).toBeUndefined();
    // The provider's redelivery: same body, same id.
    expect(await guard.claim(t, 'src1', body, first)).toBeUndefined();
    const owner = await guard.claim(t, 'src1', body, id());
    expect(owner).toBe(createHash('sha256').update(first).digest('hex').slice(0, 16));
    expect(await guard.claim(t, 'src1', sha(`b-${id()}`), id())).toBeUndefined();
    // The same bytes at another source, or another tenant, are their own.
    expect(await guard.claim(t, 'src2', body, id())).toBeUndefined();
    expect(await guard.claim(tenant(), 'src1', body, id())).toBeUndefined();
    // Every key has a TTL of at most the window plus one slot.
    const ks = await claimKeys(t);
    expect(ks.length).toBeGreaterThan(0);
    for (const k of ks) {
      const ttl = await redis.pttl(k);
      expect(ttl).toBeGreaterThan(0);
      expect(ttl).toBeLessThanOrEqual(claimSlots(WINDOW, Date.now()).ttlMs);
    }
  });

  it('claims of one batch (one event-loop turn) see each other', async () => {
    const t = tenant();
    const guard = createRedisReplayGuard(redis, keys, WINDOW);
    const body = sha(id());
    const ids = Array.from({ length: 6 }, id);
    const owners = await Promise.all(ids.map((i) => guard.claim(t, 's', body, i)));
    expect(owners[0]).toBeUndefined();
    expect(owners.slice(1).every((o) => o !== undefined)).toBe(true);
    // The first id again, in a batch with a stranger: passes, the stranger does not.
    const again = await Promise.all([guard.claim(t, 's', body, ids[0]!), guard.claim(t, 's', body, id())]);
    expect(again[0]).toBeUndefined();
    expect(again[1]).toBeDefined();
  });

  it('a claim is forgotten after the window (and at most one slot more)', async () => {
    const t = tenant();
    let now = Date.now();
    const guard = createRedisReplayGuard(redis, keys, WINDOW, { now: () => now });
    const body = sha(id());
    expect(await guard.claim(t, 's', body, id())).toBeUndefined();
    now += WINDOW / 2;
    expect(await guard.claim(t, 's', body, id())).toBeDefined();
    now += WINDOW / 2;
    // Window passed; the slot it was claimed in is still searched (one slot more at most).
    expect(await guard.claim(t, 's', body, id())).toBeDefined();
    now += 60_000;
    const late = id();
    expect(await guard.claim(t, 's', body, late)).toBeUndefined();
    expect(await guard.claim(t, 's', body, id())).toBeDefined();
    expect(await guard.claim(t, 's', body, late)).toBeUndefined();
  });

  it('window masks never lose a claim: claims of a slot written without a mask, or added to a masked slot by a guard without one, are still owned', async () => {
    const t = tenant();
    let now = Date.now();
    // Small buckets: a few dozen claims span several epochs.
    const plain = createRedisReplayGuard(redis, keys, WINDOW, {
      now: () => now,
      perBucket: 4,
      maskWords: 0,
    });
    const filt = createRedisReplayGuard(redis, keys, WINDOW, { now: () => now, perBucket: 4 });
    const fpOf = (i: string) => createHash('sha256').update(i).digest('hex').slice(0, 16);
    const claimAll = (g: typeof plain, bodies: string[], ids: string[]) =>
      Promise.all(bodies.map((b, i) => g.claim(t, 's', b, ids[i]!)));
    const bodies = (n: number) => Array.from({ length: n }, () => sha(id()));
    const ids = (n: number) => Array.from({ length: n }, id);
    // A slot written before masks existed.
    const oldBodies = bodies(50);
    const oldIds = ids(50);
    expect((await claimAll(plain, oldBodies, oldIds)).every((o) => o === undefined)).toBe(true);
    // The next slot, in a window mask.
    now += 60_000;
    const { slot } = claimSlots(WINDOW, now);
    const meta = `${keys.bodyClaim(t)}:${slot}:m`;
    const newBodies = bodies(50);
    const newIds = ids(50);
    expect((await claimAll(filt, newBodies, newIds)).every((o) => o === undefined)).toBe(true);
    const m = await redis.hgetall(meta);
    expect(m.w).toMatch(/^\d+:\d+$/);
    expect(m.fn).toBe(m.n);
    // A guard without masks adds claims to the masked slot: its mask bit is no longer used.
    const lateBodies = bodies(20);
    const lateIds = ids(20);
    expect((await claimAll(plain, lateBodies, lateIds)).every((o) => o === undefined)).toBe(true);
    const m2 = await redis.hgetall(meta);
    expect(Number(m2.n)).toBe(Number(m.n) + 20);
    expect(m2.fn).toBe(m.fn);
    // Strangers on every body are refused, with the owner's fingerprint; the owners pass.
    const all = [...oldBodies, ...newBodies, ...lateBodies];
    const owners = [...oldIds, ...newIds, ...lateIds];
    expect(await claimAll(filt, all, ids(all.length))).toEqual(owners.map(fpOf));
    expect((await claimAll(filt, all, owners)).every((o) => o === undefined)).toBe(true);
  });

  it('two guards (two ingest processes, two connections) racing on one body: exactly one owner', async () => {
    const t = tenant();
    const a = createRedisReplayGuard(redis, keys, WINDOW);
    const b = createRedisReplayGuard(other, keys, WINDOW);
    for (let round = 0; round < 50; round++) {
      const body = sha(`race-${round}-${id()}`);
      const ids = Array.from({ length: 8 }, id);
      const owners = await Promise.all(ids.map((i, n) => (n % 2 ? a : b).claim(t, 's', body, i)));
      const won = owners.filter((o) => o === undefined);
      expect(won).toHaveLength(1);
      const winner = ids[owners.indexOf(undefined)]!;
      const fp = createHash('sha256').update(winner).digest('hex').slice(0, 16);
      for (const o of owners) if (o !== undefined) expect(o).toBe(fp);
    }
  });

  it('memory: 10,000 claims use at most 40 bytes each (MEMORY USAGE of the bucket keys)', async () => {
    const t = tenant();
    const guard = createRedisReplayGuard(redis, keys, WINDOW);
    const N = 10_000;
    for (let i = 0; i < N; i += 500) {
      const owners = await Promise.all(
        Array.from({ length: 500 }, (_, j) => guard.claim(t, 'src', sha(`m-${t}-${i + j}`), `evt-${i + j}`)),
      );
      expect(owners.every((o) => o === undefined)).toBe(true);
    }
    const ks = await claimKeys(t);
    let buckets = 0;
    let meta = 0;
    for (const k of ks) {
      const bytes = Number(await redis.memory('USAGE', k, 'SAMPLES', 0));
      if (k.endsWith(':m')) meta += bytes;
      else buckets += bytes;
    }
    const perClaim = buckets / N;
    console.log(
      `body claims: ${N} claims, ${ks.length} keys, buckets ${buckets} B = ${perClaim.toFixed(1)} B/claim, ` +
        `with slot meta ${((buckets + meta) / N).toFixed(1)} B/claim`,
    );
    expect(perClaim).toBeLessThanOrEqual(40);
    expect((buckets + meta) / N).toBeLessThanOrEqual(40);
    // Still answers: a stranger on a claimed body is refused.
    expect(await guard.claim(t, 'src', sha(`m-${t}-1234`), 'someone')).toBeDefined();
  });
});

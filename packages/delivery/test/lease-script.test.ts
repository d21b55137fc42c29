import { readFileSync } from 'node:fs';
import { createKeys, createRedis, type RedisClient } from '@spillway/shared';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testConfig } from '../../../test/helpers/env.ts';
import { waitFor } from '../../../test/helpers/wait.ts';

// The script alone, called the way LeasedLimiter calls it. ARGV[4] (now, µs) moves the clock.
const LUA = readFileSync(new URL('../src/commands/lease-1.lua', import.meta.url), 'utf8');
const config = testConfig();
const keys = createKeys(config.prefix);
let redis: RedisClient;
let n = 0;

beforeAll(() => {
  redis = createRedis(config.redis);
});
afterAll(() => redis.disconnect());

const key = () => keys.rate('lua', `k${++n}`);
const T0 = 1_700_000_000_000_000; // µs
const s = (sec: number) => T0 + Math.round(sec * 1e6);

async function lease(
  k: string,
  rate: number,
  burst: number,
  want: number,
  nowUs?: number,
): Promise<{ granted: number; waitMs: number; left: number }> {
  const args = [String(rate), String(burst), String(want)];
  if (nowUs !== undefined) args.push(String(nowUs));
  const [granted, waitMs, left] = (await redis.eval(LUA, 1, k, ...args)) as [number, number, string];
  return { granted, waitMs, left: Number(left) };
}

describe('lease-1.lua', () => {
  it('starts full, grants at most what it holds, and says when the next token comes', async () => {
    const k = key();
    expect(k).toMatch(/\{t:lua\}/);
    expect(await lease(k, 10, 10, 4, s(0))).toEqual({ granted: 4, waitMs: 0, left: 6 });
    expect(await lease(k, 10, 10, 6, s(0))).toEqual({ granted: 6, waitMs: 100, left: 0 });
    expect(await lease(k, 10, 10, 1, s(0.05))).toEqual({ granted: 0, waitMs: 50, left: 0.5 });
    expect(await lease(k, 10, 10, 5, s(0.35))).toEqual({ granted: 3, waitMs: 50, left: 0.5 });
  });

  it('handles fractional rates', async () => {
    const k = key();
    expect(await lease(k, 0.5, 1, 1, s(0))).toEqual({ granted: 1, waitMs: 2000, left: 0 });
    expect(await lease(k, 0.5, 1, 1, s(1))).toEqual({ granted: 0, waitMs: 1000, left: 0.5 });
    expect(await lease(k, 0.5, 1, 1, s(2))).toEqual({ granted: 1, waitMs: 2000, left: 0 });
    const k2 = key();
    const r = await lease(k2, 2.5, 3, 3, s(0));
    expect(r.granted).toBe(3);
    expect((await lease(k2, 2.5, 3, 3, s(1))).granted).toBe(2); // 2.5 tokens → 2 whole
    expect((await lease(k2, 2.5, 3, 3, s(1))).left).toBeCloseTo(0.5, 9);
  });

  it('never grants more than burst, whatever `want` or how far the clock moves forward', async () => {
    const k = key();
    expect(await lease(k, 100, 10, 1000, s(0))).toEqual({ granted: 10, waitMs: 10, left: 0 });
    // An hour later the bucket is full, not 360 000 tokens deep.
    expect(await lease(k, 100, 10, 1000, s(3600))).toEqual({ granted: 10, waitMs: 10, left: 0 });
    // want 0 only looks.
    expect(await lease(k, 100, 10, 0, s(3600.05))).toEqual({ granted: 0, waitMs: 0, left: 5 });
  });

  it('does not refill, or credit the same interval twice, when the clock moves backwards', async () => {
    const k = key();
    expect((await lease(k, 10, 10, 10, s(10))).granted).toBe(10);
    expect(await lease(k, 10, 10, 10, s(5))).toEqual({ granted: 0, waitMs: 100, left: 0 });
    // Back at 10.5 s: only the 0.5 s since the last real refill counts.
    expect((await lease(k, 10, 10, 10, s(10.5))).granted).toBe(5);
  });

  it('expires the key exactly when it would be full again, and a missing key is a full bucket', async () => {
    const k = key();
    // Real Redis clock here: PEXPIRE is real time.
    const r = await lease(k, 1000, 10, 10);
    expect(r.granted).toBe(10);
    const ttl = await redis.pttl(k);
    // (burst − tokens) / rate = 10 ms, plus 1 s of slack.
    expect(ttl).toBeGreaterThan(900);
    expect(ttl).toBeLessThanOrEqual(1010);
    const full = key();
    expect((await lease(full, 1, 5, 0)).left).toBe(5);
    expect(await redis.pttl(full)).toBeLessThanOrEqual(1000);
    await redis.pexpire(k, 1);
    await waitFor(async () => (await redis.exists(k)) === 0, 'the bucket key to expire', 5_000, 5);
    expect((await lease(k, 1000, 10, 10)).granted).toBe(10);
  });

  it('rejects bad arguments', async () => {
    await expect(lease(key(), 0, 10, 1)).rejects.toThrow(/lease: rate must be > 0/);
    await expect(lease(key(), 1, 0, 1)).rejects.toThrow(/burst >= 1/);
    await expect(lease(key(), 1, 1, -1)).rejects.toThrow(/want >= 0/);
  });
});

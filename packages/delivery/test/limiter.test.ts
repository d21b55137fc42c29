import { createKeys, createLogger, createRedis, loadConfig, type RedisClient } from '@spillway/shared';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { testConfig } from '../../../test/helpers/env.ts';
import { type PrivateRedis, startPrivateRedis } from '../../../test/helpers/redis-server.ts';
import { sleep, waitFor } from '../../../test/helpers/wait.ts';
import { LeasedLimiter, type LeasedLimiterOptions, type LeaseRecord } from '../src/index.ts';

const config = testConfig();
const keys = createKeys(config.prefix);
let redis: RedisClient;
const limiters: LeasedLimiter[] = [];
let n = 0;
const key = () => keys.rate('lim', `k${++n}`);

beforeAll(() => {
  redis = createRedis(config.redis);
});
afterAll(() => redis.disconnect());
afterEach(async () => {
  for (const l of limiters.splice(0)) await l.close();
});

function limiter(opts: Partial<LeasedLimiterOptions> = {}, client: RedisClient = redis): LeasedLimiter {
  const l = new LeasedLimiter({ redis: client, logger: createLogger('silent'), ...opts });
  limiters.push(l);
  return l;
}

describe('LeasedLimiter', () => {
  it('tryTake gives the burst, then says how long to wait', async () => {
    const l = limiter();
    const k = key();
    const rate = { perSecond: 2, burst: 3 };
    for (let i = 0; i < 3; i++) expect(await l.tryTake(k, rate)).toEqual({ ok: true });
    const no = await l.tryTake(k, rate);
    expect(no.ok).toBe(false);
    expect(!no.ok && no.retryAfterMs).toBeGreaterThan(0);
    expect(!no.ok && no.retryAfterMs).toBeLessThanOrEqual(500);
  });

  it('holds the rate for a burst of waiters, and leases stay within what the rate can refill', async () => {
    const leases: LeaseRecord[] = [];
    const l = limiter({ onLease: (x) => leases.push(x) });
    const k = key();
    const rate = { perSecond: 200, burst: 5 };
    const t0 = Date.now();
    await Promise.all(Array.from({ length: 105 }, () => l.acquire(k, rate)));
    const elapsed = Date.now() - t0;
    // (105 − burst) / 200 per s = 500 ms at least; a few ms of clock granularity either way.
    expect(elapsed).toBeGreaterThanOrEqual(480);
    expect(l.stats().used).toBe(105);
    expect(leases.reduce((a, x) => a + x.granted, 0)).toBeGreaterThanOrEqual(105);
    expect(Math.max(...leases.map((x) => x.granted))).toBeLessThanOrEqual(5);
  });

  it('leases small for a slow key', async () => {
    const leases: LeaseRecord[] = [];
    const l = limiter({ onLease: (x) => leases.push(x) });
    const k = key();
    // Slow means slow: ~5 acquires/s. Back-to-back acquires look like a burst and rightly get a
    // bigger lease (the lease covers ~100 ms of the observed rate).
    for (let i = 0; i < 4; i++) {
      await l.acquire(k, { perSecond: 20, burst: 20 });
      await sleep(200); // pacing: the caller is slow on purpose
    }
    expect(Math.max(...leases.map((x) => x.want))).toBeLessThanOrEqual(2);
    expect(l.outstanding(k)).toBeLessThanOrEqual(2);
  });

  it('makes ≤ 0.1 Redis calls per token at 1,000/s on one hot key', async () => {
    const l = limiter();
    const k = key();
    const rate = { perSecond: 5_000, burst: 1_000 };
    const pending: Promise<void>[] = [];
    const t0 = Date.now();
    for (let tick = 0; tick < 200; tick++) {
      for (let i = 0; i < 10; i++) pending.push(l.acquire(k, rate));
      // Keep to ~1,000/s of wall time.
      const ahead = t0 + (tick + 1) * 10 - Date.now();
      if (ahead > 0) await sleep(ahead);
    }
    await Promise.all(pending);
    const st = l.stats();
    const perToken = st.redisCalls / st.used;
    console.log(
      `hot key: ${st.used} tokens in ${Date.now() - t0} ms, ${st.redisCalls} Redis calls → ${perToken.toFixed(4)} calls per delivery`,
    );
    expect(st.used).toBe(2000);
    expect(perToken).toBeLessThanOrEqual(0.1);
  });

  it('rejects a waiting acquire when its signal aborts, and serves the others', async () => {
    const l = limiter();
    const k = key();
    const rate = { perSecond: 5, burst: 1 };
    await l.acquire(k, rate);
    const ac = new AbortController();
    const waiting = l.acquire(k, rate, ac.signal);
    ac.abort(new Error('gone'));
    await expect(waiting).rejects.toThrow('gone');
    await l.acquire(k, rate); // the next token still arrives (~200 ms)
    expect(l.stats().used).toBe(2);
  });
});

describe('LeasedLimiter when Redis goes away', () => {
  let own: PrivateRedis;
  let client: RedisClient;
  beforeAll(async () => {
    own = await startPrivateRedis();
  });
  afterAll(async () => {
    await own.destroy();
  });
  afterEach(() => client?.disconnect());

  function connect(): RedisClient {
    client = createRedis(loadConfig({ SPILLWAY_REDIS_URL: own.url }).redis, {
      maxRetriesPerRequest: 1,
      retryStrategy: () => 100,
    });
    client.on('error', () => {});
    return client;
  }

  it('fail-closed: callers wait while Redis is down and are served when it returns', async () => {
    const c = connect();
    const l = limiter({ failPolicy: 'closed', callTimeoutMs: 300, retryMs: 200 }, c);
    const k = key();
    const rate = { perSecond: 50, burst: 5 };
    await l.acquire(k, rate);
    await own.kill();
    await waitFor(() => c.status !== 'ready', 'the client to see Redis gone', 5_000, 10);
    // Drain anything leased before the stop, then ask for more than that.
    let served = 0;
    const waits = Array.from({ length: 20 }, () => l.acquire(k, rate).then(() => served++));
    // Deliberate pauses: they prove callers are NOT served while Redis is down (fail-closed).
    await sleep(400);
    const servedWhileDown = served;
    await sleep(800);
    expect(served).toBe(servedWhileDown);
    expect(servedWhileDown).toBeLessThanOrEqual(5);
    expect(l.stats().redisErrors).toBeGreaterThan(0);
    expect(l.stats().fallbackUsed).toBe(0);
    // AOF-backed Redis comes back on the same port; the script cache is empty (NOSCRIPT → reload).
    await own.start();
    await Promise.all(waits);
    expect(served).toBe(20);
  });

  it('fail-open: a local bucket at rate ÷ workers serves callers while Redis is down, Redis again after', async () => {
    const c = connect();
    const l = limiter({ failPolicy: 'open', workers: 2, callTimeoutMs: 300, retryMs: 200 }, c);
    const k = key();
    const rate = { perSecond: 40, burst: 4 };
    await l.acquire(k, rate);
    await own.kill();
    await waitFor(() => c.status !== 'ready', 'the client to see Redis gone', 5_000, 10);
    const t0 = Date.now();
    // 20 tokens at 40 ÷ 2 = 20/s locally: about a second, not "never" and not "at once".
    await Promise.all(Array.from({ length: 20 }, () => l.acquire(k, rate)));
    const took = Date.now() - t0;
    const st = l.stats();
    expect(st.fallbackUsed).toBeGreaterThan(0);
    expect(st.redisErrors).toBeGreaterThan(0);
    expect(took).toBeGreaterThanOrEqual(((st.fallbackUsed - 2) / 20) * 1000);
    await own.start();
    const callsBefore = l.stats().redisCalls;
    const errorsBefore = l.stats().redisErrors;
    // Recovery: within a couple of seconds a lease succeeds again and fallback stops growing.
    for (let i = 0; i < 60; i++) {
      await l.acquire(k, rate);
      if (l.stats().redisCalls - l.stats().redisErrors > callsBefore - errorsBefore) break;
    }
    expect(l.stats().redisCalls - l.stats().redisErrors).toBeGreaterThan(callsBefore - errorsBefore);
    const fb = l.stats().fallbackUsed;
    for (let i = 0; i < 5; i++) await l.acquire(k, rate);
    expect(l.stats().fallbackUsed).toBe(fb);
  });
});

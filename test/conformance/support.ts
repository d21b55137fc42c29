/**
 * Test-only stand-ins for the router's pieces the ingest pipeline talks to through shared
 * interfaces: a durable Intake and a RateGate, both on real Redis (never a mock of it). The router's
 * real intake (group commit, BullMQ) is tested with the router; these let the conformance suite run
 * any ingest backend against the Intake contract: durable before it resolves, dedup per tenant
 * within the window, SPW_ERR_UNAVAILABLE when Redis cannot take the write.
 */
import {
  errors,
  type Intake,
  type Keys,
  type Rate,
  type RateGate,
  type Source,
  type SourceDirectory,
  type SpillwayEvent,
  type TakeResult,
} from '@spillway/shared';
import { Redis } from 'ioredis';

export interface StoredEvent {
  tenantId: string;
  id: string;
  type: string;
  contentType: string;
  sourceId?: string;
  body: Buffer;
}

// KEYS[1] dedup key, KEYS[2] accepted list; ARGV[1] window ms, ARGV[2] event JSON.
// Returns 1 when stored, 0 when a duplicate.
const SUBMIT = `
if redis.call('SET', KEYS[1], '1', 'NX', 'PX', ARGV[1]) then
  redis.call('RPUSH', KEYS[2], ARGV[2])
  return 1
end
return 0`;

export interface TestIntake extends Intake {
  /** Resolves once connected (without an offline queue, a submit before that fails). */
  readonly ready: Promise<void>;
  accepted(tenantId: string): Promise<StoredEvent[]>;
  close(): void;
}

export function acceptedKey(keys: Keys, tenantId: string): string {
  return `${keys.prefix}:{t:${tenantId}}:conformance-accepted`;
}

/** Redis at `url`; no offline queue, so a stopped Redis fails a submit at once (→ 503). */
export function createTestIntake(url: string, keys: Keys, windowMs = 60_000): TestIntake {
  const redis = new Redis(url, {
    enableOfflineQueue: false,
    maxRetriesPerRequest: 1,
    retryStrategy: () => 100,
    lazyConnect: false,
  });
  redis.on('error', () => {});
  const ready = new Promise<void>((resolve) => redis.once('ready', () => resolve()));
  return {
    ready,
    async submit(event: SpillwayEvent, opts: { gate?: () => Promise<boolean>; dedupKey?: string } = {}) {
      const dedup = `${keys.dedupBase(event.tenantId)}:test:${opts.dedupKey ?? event.id}`;
      const json = JSON.stringify({ ...event, body: event.body.toString('base64') });
      let stored: unknown;
      try {
        // As Intake.submit: the gate is asked only for an event that is not a duplicate, and
        // nothing is written for an event it withdraws.
        if (opts.gate) {
          if ((await redis.exists(dedup)) === 1) return { id: event.id, duplicate: true };
          if (!(await opts.gate().catch(() => false)))
            return { id: event.id, duplicate: false, withdrawn: true as const };
        }
        stored = await redis.eval(SUBMIT, 2, dedup, acceptedKey(keys, event.tenantId), windowMs, json);
      } catch (err) {
        throw errors.unavailable(`test intake: ${(err as Error).message}`, { cause: err, retryAfter: 2 });
      }
      return { id: event.id, duplicate: stored !== 1 };
    },
    async accepted(tenantId: string) {
      const raw = await redis.lrange(acceptedKey(keys, tenantId), 0, -1);
      return raw.map((r) => {
        const e = JSON.parse(r) as StoredEvent & { body: string };
        return { ...e, body: Buffer.from(e.body, 'base64') };
      });
    },
    close: () => redis.disconnect(),
  };
}

// KEYS[1] bucket; ARGV[1] perSecond, ARGV[2] burst. Redis clock. Returns {ok, retryAfterMs}.
const TAKE = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rate, burst = tonumber(ARGV[1]), tonumber(ARGV[2])
local b = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens, ts = tonumber(b[1]) or burst, tonumber(b[2]) or now
tokens = math.min(burst, tokens + (now - ts) * rate / 1000)
local ok, wait = 0, 0
if tokens >= 1 then tokens = tokens - 1; ok = 1 else wait = math.ceil((1 - tokens) * 1000 / rate) end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', now)
redis.call('PEXPIRE', KEYS[1], 60000)
return {ok, wait}`;

/** A plain Redis token bucket behind the RateGate interface (the leased limiter lives in delivery). */
export function createTestRateGate(url: string): RateGate {
  const redis = new Redis(url);
  return {
    async tryTake(key: string, rate: Rate): Promise<TakeResult> {
      const [ok, wait] = (await redis.eval(TAKE, 1, key, rate.perSecond, rate.burst)) as [number, number];
      return ok === 1 ? { ok: true } : { ok: false, retryAfterMs: wait };
    },
    async acquire() {
      throw new Error('not used by ingest');
    },
    async close() {
      redis.disconnect();
    },
  };
}

/** Sources kept in memory: the pipeline only needs the SourceDirectory interface. */
export class MemorySources implements SourceDirectory {
  readonly map = new Map<string, Source>();
  /** Called after every add (the harness feeds the backends' route tables from it, as the ingest role does). */
  onChange: (() => void) | undefined;
  async get(id: string): Promise<Source | undefined> {
    return this.map.get(id);
  }
  add(s: Omit<Source, 'createdAt' | 'maxBodyBytes'> & { maxBodyBytes?: number }): Source {
    const src: Source = { maxBodyBytes: 1024 * 1024, createdAt: new Date().toISOString(), ...s };
    this.map.set(src.id, src);
    this.onChange?.();
    return src;
  }
}

export { freePort } from '../helpers/ports.ts';
// A private redis-server (AOF on) that a test may stop and start; never the shared one.
export { PrivateRedis as OwnRedis } from '../helpers/redis-server.ts';

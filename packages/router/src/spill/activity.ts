import { BatchedWriter, type Keys, type Logger, type RedisClient } from '@spillway/shared';
import { Partitioners } from 'kafkajs';
import { firstError, type PipeResult } from '../records/pipeline.ts';

/** How long a tenant's last spill is remembered (and the key lives after the last spill). */
export const ACTIVITY_KEEP_MS = 24 * 3_600_000;
/** Two workers' clocks may differ by this much: a spill is looked for from this much earlier. */
export const ACTIVITY_SKEW_MS = 5000;
/** The spill producer trims tenants older than ACTIVITY_KEEP_MS at most this often. */
const TRIM_EVERY_MS = 60_000;
/**
 * Notes are written at most this often (what arrives meanwhile goes in the next write). Under a
 * flood the producer sends every few ms, and a write per send cost the worker a Redis round trip
 * each (~150 a second). The drainer asks every 500 ms and finds a tenant not noted yet at its next
 * ask, so a note this late delays a re-append it decides by one ask at most.
 */
export const NOTE_EVERY_MS = 200;

/**
 * Who spilled lately: the ZSET `keys.spillActivity`, tenant → when a spill record of it was last
 * acknowledged by Kafka (ms). The spill producer notes every send after its acknowledgement (one
 * pipeline per NOTE_EVERY_MS at most); the drainer asks it when a look-ahead is blocked and records
 * wait behind it:
 * if no tenant but the blocked ones spilled to that partition since the look-ahead's last record
 * was written, every record behind is a blocked tenant's, and re-appending the look-ahead to the
 * tail would move nothing forward (a flood's backlog re-appended a quarter of itself every 2 s,
 * docs/benchmarks/profile.md). The answer errs towards "someone else": a tenant not noted yet (the
 * note follows the acknowledgement) is found by the next ask, 500 ms later; a note lost to a crash
 * or a Redis error leaves that tenant behind the look-ahead for at most the idle wait
 * (IDLE_BLOCKED_WAIT_MS), as before this existed. The producer trims it to a day and refreshes its
 * TTL, so the key goes a day after the last spill.
 */
export class SpillActivity {
  readonly #redis: RedisClient;
  readonly #key: string;
  readonly #logger: Logger;
  #pending = new Set<string>();
  #lastTrim = 0;
  /** One write at a time, starts NOTE_EVERY_MS apart; what is noted meanwhile goes in the next. */
  readonly #writer = new BatchedWriter<string[]>({
    flushMs: 0,
    serial: true,
    spacingMs: NOTE_EVERY_MS,
    take: () => {
      if (this.#pending.size === 0) return undefined;
      const tenants = [...this.#pending];
      this.#pending = new Set();
      return tenants;
    },
    write: (tenants) => this.#write(tenants),
  });

  constructor(redis: RedisClient, keys: Keys, logger: Logger) {
    this.#redis = redis;
    this.#key = keys.spillActivity;
    this.#logger = logger;
  }

  /**
   * Tenants whose spill records Kafka just acknowledged (repeats collapse): written at once if the
   * last write started NOTE_EVERY_MS ago, else with the next write. The time written is the
   * write's, never earlier than the acknowledgement: a late note errs towards "someone spilled
   * since".
   */
  note(tenants: Iterable<string>): void {
    for (const t of tenants) this.#pending.add(t);
    this.#writer.buffered(false);
  }

  /** A failed note is dropped (the drainer then errs towards "someone else", see above). */
  async #write(tenants: string[]): Promise<void> {
    try {
      const now = Date.now();
      const pipe = this.#redis.pipeline();
      pipe.zadd(this.#key, ...tenants.flatMap((t) => [now, t]));
      pipe.pexpire(this.#key, ACTIVITY_KEEP_MS);
      if (now - this.#lastTrim >= TRIM_EVERY_MS) {
        this.#lastTrim = now;
        pipe.zremrangebyscore(this.#key, '-inf', now - ACTIVITY_KEEP_MS);
      }
      const err = firstError([((await pipe.exec()) ?? []) as PipeResult[]]);
      if (err) throw err;
    } catch (err) {
      this.#logger.debug({ err }, 'spill activity note failed');
    }
  }

  /**
   * Whether a tenant outside `blocked` that maps to `partition` (of `partitions`) spilled at or
   * after `since` (ms, less ACTIVITY_SKEW_MS). True when it cannot tell: Redis unreachable, or
   * `since` older than what is kept.
   */
  async othersSince(
    topic: string,
    partition: number,
    partitions: number,
    blocked: ReadonlySet<string>,
    since: number,
  ): Promise<boolean> {
    const from = since - ACTIVITY_SKEW_MS;
    if (!(from > Date.now() - ACTIVITY_KEEP_MS)) return true;
    let recent: string[];
    try {
      recent = await this.#redis.zrangebyscore(this.#key, from, '+inf');
    } catch (err) {
      this.#logger.debug({ err }, 'spill activity read failed');
      return true;
    }
    return recent.some((t) => !blocked.has(t) && partitionOf(topic, t, partitions) === partition);
  }
}

const partitioner = Partitioners.DefaultPartitioner();
const metadata = new Map<number, { partitionId: number; leader: number }[]>();

/** The partition the spill producer's records of `tenantId` go to: kafkajs's default partitioner on the key. */
export function partitionOf(topic: string, tenantId: string, partitions: number): number {
  let m = metadata.get(partitions);
  if (!m) {
    m = Array.from({ length: partitions }, (_, i) => ({ partitionId: i, leader: 0 }));
    metadata.set(partitions, m);
  }
  return partitioner({ topic, partitionMetadata: m as never, message: { key: tenantId, value: null } });
}

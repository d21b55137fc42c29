import type { Keys, RedisClient } from '@spillway/shared';
import type { KafkaRangeReader } from '../../history/kafka-range.ts';
import { type AttemptRecord, unpackRecords } from '../../history/wire.ts';
import { INDEX_SLOT_MS } from '../../records/fingerprints.ts';

/** Attempts one tick samples at most (per minute range). */
const MAX_SAMPLE = 2000;
/** Messages one tick reads at most (per minute range): the newest. A message packs one flush's attempts. */
const MAX_MESSAGES = 200;
/** Minutes of the attempt index looked at: the current one and the one before. */
const WINDOW_MS = 2 * 60_000;

/** Delivery latency of the attempts that ended since the previous tick (ms); null when none did. */
export interface Latency {
  /** Attempts it covers (at most MAX_SAMPLE of them are read). */
  n: number;
  p50: number;
  p95: number;
  max: number;
}

const quantile = (sorted: number[], q: number) =>
  sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;

/**
 * A tenant's delivery latency for the console's tenant stream, read from the attempt history the
 * workers already write (docs/storage.md): no new work on the delivery path. One instance belongs
 * to one stream topic (the hub runs one producer per viewed tenant, however many consoles view it),
 * and each tick costs one HGETALL of the tenant's attempt-minute index (two near an hour's turn)
 * and a bounded Kafka fetch of the records added since the previous tick — never a scan.
 */
export class LatencyTracker {
  readonly #redis: RedisClient;
  readonly #keys: Keys;
  readonly #kafka: KafkaRangeReader;
  readonly #topic: string;
  readonly #tid: string;
  /** `hour:minute:partition` → the last offset already read there. */
  #seen = new Map<string, bigint>();
  #primed = false;

  constructor(o: {
    redis: RedisClient;
    keys: Keys;
    kafka: KafkaRangeReader;
    topic: string;
    tenantId: string;
  }) {
    this.#redis = o.redis;
    this.#keys = o.keys;
    this.#kafka = o.kafka;
    this.#topic = o.topic;
    this.#tid = o.tenantId;
  }

  /** The latency of the attempts logged since the previous call (the first call only sets the start). */
  async next(now = Date.now()): Promise<Latency | null> {
    const base = this.#keys.historyMinutes(this.#tid, 'attempts');
    const hours = [
      ...new Set([Math.floor((now - WINDOW_MS) / INDEX_SLOT_MS), Math.floor(now / INDEX_SLOT_MS)]),
    ];
    const pipe = this.#redis.pipeline();
    for (const h of hours) pipe.hgetall(`${base}:${h}`);
    const res = (await pipe.exec()) ?? [];
    const ranges: { key: string; partition: number; first: bigint; last: bigint }[] = [];
    hours.forEach((hour, i) => {
      const [err, all] = res[i] ?? [];
      if (err) throw err;
      for (const [f, v] of Object.entries((all ?? {}) as Record<string, string>)) {
        const [m, p] = f.split(':');
        if (hour * INDEX_SLOT_MS + Number(m) * 60_000 + 60_000 < now - WINDOW_MS) continue;
        const [a, b] = v.split(':');
        ranges.push({ key: `${hour}:${f}`, partition: Number(p), first: BigInt(a!), last: BigInt(b!) });
      }
    });
    const primed = this.#primed;
    this.#primed = true;
    const seen = new Map<string, bigint>();
    const ms: number[] = [];
    let n = 0;
    for (const r of ranges) {
      const prev = this.#seen.get(r.key);
      seen.set(r.key, r.last);
      if (!primed) continue;
      const from = prev === undefined ? r.first : prev + 1n;
      if (from > r.last) continue;
      // Only the newest messages of a busy minute: the latency of "now", not a backlog.
      const tail = r.last - BigInt(MAX_MESSAGES - 1);
      await this.#kafka.read(
        this.#topic,
        r.partition,
        from > tail ? from : tail,
        r.last,
        (rec) => {
          if (rec.key !== this.#tid) return;
          for (const a of unpackRecords<AttemptRecord>(rec.value)) {
            if (a.t !== this.#tid) continue;
            n++;
            ms.push(a.ms);
          }
          return ms.length < MAX_SAMPLE;
        },
        MAX_MESSAGES,
      );
    }
    this.#seen = seen;
    if (ms.length === 0) return null;
    ms.sort((x, y) => x - y);
    return { n, p50: quantile(ms, 0.5), p95: quantile(ms, 0.95), max: ms.at(-1)! };
  }
}

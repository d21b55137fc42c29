import { sleep } from '@spillway/shared';
import { withCommands } from '../commands/index.ts';
import { historyPartition, lazyProducer } from '../history/topics.ts';
import { dlqArchivedTotal } from '../metrics.ts';
import type { Runtime } from '../roles/runtime.ts';
import type { DlqItem } from './records.ts';

/** Entries moved per round (one produce, one Lua call). */
const CHUNK = 500;
/** How often a worker looks for entries past the TTL (tenants with a DLQ). */
const SWEEP_MS = 60_000;
const LOCK_MS = 30_000;
/** How long a writer that found the list full waits for room (then it errs and retries later). */
const ROOM_WAIT_MS = 5000;
const ROOM_POLL_MS = 50;

/**
 * Keeps each tenant's DLQ bounded in Redis (docs/storage.md). The cap (SPILLWAY_DLQ_CAP) is hard:
 * a write is one Lua step that refuses when the list is full (dlq-push-1.lua), and the writer then
 * waits for `makeRoom`, so the list never holds more than the cap, not even between a push and
 * its archiving (the storage bench once saw 1,275 entries at a cap of 1,250 that way). So that
 * writers rarely wait, archiving starts before the cap: past `cap - slack` entries the oldest
 * move until `cap - 2 * slack` are left (slack: a tenth of the cap, 1 to 500), and entries older
 * than SPILLWAY_DLQ_TTL move too. They go to the Kafka DLQ archive (`<history>.dlq`, keyed by
 * tenant, retained for the record retention). Archive first: an entry leaves the list only after
 * Kafka acknowledged it (acks=-1), and by value (LREM), so entries replayed or purged meanwhile
 * are not touched, and a full list only makes writers wait (the task keeps its credit), never
 * drops. One process archives a tenant at a time (a lock). The archive's entries stay findable:
 * their events are in the failed-events set and the event log, so `recover` resends them.
 */
export interface DlqArchiverOptions extends Pick<Runtime, 'redis' | 'keys' | 'logger' | 'kafka'> {
  /** The archive topic (`<history>.dlq`) and its partition count. */
  topic: string;
  partitions: number;
  /** SPILLWAY_DLQ_CAP, SPILLWAY_DLQ_TTL */
  cap: number;
  ttlMs: number;
}

export class DlqArchiver {
  readonly #o: DlqArchiverOptions;
  readonly #redis: ReturnType<typeof withCommands>;
  readonly #producer: ReturnType<typeof lazyProducer>;
  readonly #running = new Map<string, Promise<void>>();
  readonly #again = new Set<string>();
  readonly #timer: NodeJS.Timeout;
  /** Archiving starts past `cap - slack` entries and leaves `cap - 2 * slack`. */
  readonly #slack: number;

  constructor(o: DlqArchiverOptions) {
    this.#o = o;
    this.#slack = Math.max(1, Math.min(CHUNK, Math.floor(o.cap / 10)));
    this.#redis = withCommands(o.redis);
    this.#producer = lazyProducer(o.kafka);
    this.#timer = setInterval(() => void this.sweep(), SWEEP_MS);
    this.#timer.unref();
  }

  /** The hard cap a DLQ write passes to dlq-push-1.lua. */
  get cap(): number {
    return this.#o.cap;
  }

  /** Past this many entries the oldest start moving to the archive. */
  get #high(): number {
    return this.#o.cap - this.#slack;
  }

  /** After a DLQ write: archive the oldest if the list nears its cap (not awaited by the caller). */
  pushed(tenantId: string, length: number): void {
    if (length > this.#high) void this.#archive(tenantId);
  }

  /**
   * A write found the list full: resolves once it has room again (an archive round here, or
   * another process's), rejects after ROOM_WAIT_MS (Kafka down) so the caller's retry logs it.
   */
  async makeRoom(tenantId: string): Promise<void> {
    const key = this.#o.keys.dlq(tenantId);
    for (const until = Date.now() + ROOM_WAIT_MS; ; ) {
      await this.#archive(tenantId);
      if ((await this.#o.redis.llen(key)) < this.#o.cap) return;
      if (Date.now() > until) throw new Error(`the DLQ of ${tenantId} is full and could not be archived`);
      // Another process holds the archive lock (or its round had not reached the new entries).
      await sleep(ROOM_POLL_MS);
    }
  }

  /** Every tenant's entries past the TTL (and any overflow), now. */
  async sweep(): Promise<void> {
    try {
      for (const tid of await this.#o.redis.smembers(this.#o.keys.tenants)) {
        const head = await this.#o.redis.lindex(this.#o.keys.dlq(tid), 0);
        if (!head) continue;
        const len = await this.#o.redis.llen(this.#o.keys.dlq(tid));
        const old = Date.parse((JSON.parse(head) as DlqItem).failedAt) < Date.now() - this.#o.ttlMs;
        if (old || len > this.#high) await this.#archive(tid);
      }
    } catch (err) {
      this.#o.logger.debug({ err }, 'dlq sweep failed');
    }
  }

  #archive(tenantId: string): Promise<void> {
    let p = this.#running.get(tenantId);
    if (p) {
      // Entries written while a round runs may be past its last look: one more round after it.
      this.#again.add(tenantId);
      return p;
    }
    p = this.#run(tenantId)
      .catch((err: unknown) => this.#o.logger.warn({ err, tenantId }, 'dlq archive failed; will retry'))
      .finally(() => {
        this.#running.delete(tenantId);
        if (this.#again.delete(tenantId)) void this.#archive(tenantId);
      });
    this.#running.set(tenantId, p);
    return p;
  }

  async #run(tenantId: string): Promise<void> {
    const { redis, keys } = this.#o;
    const lock = keys.dlqArchiving(tenantId);
    const token = `${process.pid}-${Math.random()}`;
    if ((await redis.set(lock, token, 'PX', LOCK_MS, 'NX')) !== 'OK') return;
    try {
      for (;;) {
        const len = await redis.llen(keys.dlq(tenantId));
        const raws = await redis.lrange(keys.dlq(tenantId), 0, CHUNK - 1);
        const cutoff = Date.now() - this.#o.ttlMs;
        // Near the cap, down to `cap - 2 * slack`; plus whatever at the head is past the TTL.
        let n = len > this.#high ? len - Math.max(0, this.#o.cap - 2 * this.#slack) : 0;
        while (n < raws.length && Date.parse((JSON.parse(raws[n]!) as DlqItem).failedAt) < cutoff) n++;
        n = Math.min(n, raws.length);
        if (n === 0) return;
        const move = raws.slice(0, n);
        const producer = await this.#producer.get();
        await producer.send({
          topic: this.#o.topic,
          acks: -1,
          messages: move.map((value) => ({
            key: tenantId,
            value,
            partition: historyPartition(tenantId, this.#o.partitions),
          })),
        });
        const removed = await this.#redis.dlqRemove(keys.dlq(tenantId), ...move);
        dlqArchivedTotal.inc(removed);
        this.#o.logger.info({ tenantId, archived: removed }, 'dead letters moved to the DLQ archive');
        await redis.pexpire(lock, LOCK_MS);
      }
    } finally {
      if ((await redis.get(lock)) === token) await redis.del(lock);
    }
  }

  async close(): Promise<void> {
    clearInterval(this.#timer);
    await Promise.allSettled([...this.#running.values()]);
    await this.#producer.close();
  }
}

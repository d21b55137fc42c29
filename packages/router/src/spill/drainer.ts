import { type Logger, retryForever, sleep } from '@spillway/shared';
import type { Admin, Consumer, EachBatchPayload, Kafka } from 'kafkajs';
import { spillAdmittedTotal, spillLookaheadRecords, spillReappendedTotal } from '../metrics.ts';
import type { TenantCounters } from '../records/counters.ts';
import type { Engine } from '../worker/engine.ts';
import { type DeliveryTask, taskFromWire, type WireTask } from '../worker/fanout.ts';
import type { Owner } from '../worker/lanes.ts';
import type { SpillActivity } from './activity.ts';
import type { SpillProducer } from './producer.ts';

/**
 * A batch whose only remaining tasks are blocked, with other records behind it on the partition,
 * waits this long for credits/resume before re-appending them (the head-of-line bound for others).
 */
const BLOCKED_WAIT_MS = 1000;
/**
 * Each further re-append of a partition's head that made no progress for anyone doubles that
 * wait, up to this (reset by any progress): a deep blocked backlog — a paused tenant, a flood into
 * a hanging endpoint — is cycled through Kafka at a bounded rate instead of one look-ahead per
 * second for as long as it lasts.
 */
const MAX_BLOCKED_WAIT_MS = 2000;
/**
 * The same batch with nothing behind it (it reaches the partition's end) waits this long instead:
 * re-appending would only cycle a paused backlog through Kafka for nobody's benefit. It still wakes
 * on resume/credits (Engine.onWake) and on new records arriving (LATEST_POLL_MS).
 */
const IDLE_BLOCKED_WAIT_MS = 10_000;
/** While a batch waits at the partition's end, its latest offset is polled this often (admin client). */
const LATEST_POLL_MS = 500;
/** Default consumer session timeout (SPILLWAY_KAFKA_SESSION_TIMEOUT overrides it). */
const SESSION_TIMEOUT_MS = 10_000;
/** Bytes fetched per partition per batch: this is the look-ahead bound. */
const LOOKAHEAD_BYTES = 256 * 1024;

type State = 'new' | 'running' | 'done';

/** One record of the look-ahead; it is the task's Owner while the task is in memory. */
interface Entry extends Owner {
  offset: string;
  /** The record's key: its tenant (the producer keys every record by it). */
  tenantId: string;
  /** The record as read; re-appended as is while the entry is blocked. */
  raw: Buffer;
  /** Parsed when the entry is first offered (a blocked tenant's other records never are). */
  task: DeliveryTask | undefined;
  state: State;
}

/** The entry's task, parsed on first use; undefined (and the entry done) when it cannot be read. */
function taskOf(e: Entry): DeliveryTask | undefined {
  if (e.task || e.state === 'done') return e.task;
  try {
    e.task = taskFromWire(JSON.parse(e.raw.toString()) as WireTask);
    if (e.tenantId === '') e.tenantId = e.task.tenantId;
  } catch {
    e.state = 'done';
  }
  return e.task;
}

export interface DrainerOptions {
  kafka: Kafka;
  topic: string;
  groupId: string;
  engine: Engine;
  /** Re-appends blocked tasks to the tail of the topic. */
  producer: SpillProducer;
  /**
   * Who spilled lately (the producer notes it): tells whether the records behind a blocked
   * look-ahead are only the blocked tenants' own. Without it, any record behind counts as another's.
   */
  activity?: SpillActivity;
  logger: Logger;
  /** Shared per-tenant counters: a record the drainer resolves leaves the tenant's spilled backlog. */
  counters: TenantCounters;
  /** Consumer group session timeout: how long until a dead worker's partitions move to another. */
  sessionTimeoutMs?: number;
}

/**
 * Brings spilled tasks back into memory as credits free up. One consumer group, so workers share
 * partitions. Per partition batch (the look-ahead, ≤ LOOKAHEAD_BYTES):
 *   - admit every task whose tenant has a credit and is not paused, in offset order; skip the rest;
 *   - resolve offsets only up to the lowest unresolved one (a task is resolved once it left memory
 *     through a durable hand-off, or was re-appended to the tail and acked);
 *   - when nothing is running and only blocked tasks remain, re-append them to the tail (produce
 *     first, then resolve) — at once if the batch made progress for others, after BLOCKED_WAIT_MS
 *     if another tenant's records wait behind the look-ahead — so a paused or saturated tenant never
 *     holds back another tenant on the partition. With nothing behind, or only more of the blocked
 *     tenants' own records (SpillActivity says no one else spilled there since), wait up to
 *     IDLE_BLOCKED_WAIT_MS (waking on resume, credits or new records) so a long pause or a flood
 *     does not churn its backlog every second.
 * While a batch is in progress kafkajs fetches nothing more for that partition, so memory per
 * partition stays at one look-ahead (that is the partition "pause").
 */
export class Drainer {
  readonly #o: DrainerOptions;
  #consumer: Consumer | undefined;
  #stopping = false;
  #admin: Promise<Admin> | undefined;
  /** Latest offsets of the topic (partition → high watermark), shared by the partitions waiting at their end. */
  #latest: { at: number; offsets: Promise<Map<number, bigint>> } | undefined;
  /** Per partition: how long a blocked head waits before it is re-appended (see MAX_BLOCKED_WAIT_MS). */
  readonly #blockedWait = new Map<number, number>();
  /** Tasks re-appended to the tail (for stats/tests). */
  reappended = 0;
  admitted = 0;

  constructor(opts: DrainerOptions) {
    this.#o = opts;
  }

  async start(): Promise<void> {
    const consumer = this.#o.kafka.consumer({
      groupId: this.#o.groupId,
      sessionTimeout: this.#o.sessionTimeoutMs ?? SESSION_TIMEOUT_MS,
      heartbeatInterval: 1000,
      rebalanceTimeout: 30_000,
      maxBytesPerPartition: LOOKAHEAD_BYTES,
      maxWaitTimeInMs: 200,
      retry: { retries: 10, initialRetryTime: 300, maxRetryTime: 5000, restartOnFailure: async () => true },
    });
    this.#consumer = consumer;
    consumer.on(consumer.events.CRASH, (e) => {
      this.#o.logger.warn({ err: e.payload.error, restart: e.payload.restart }, 'drainer consumer crashed');
      // kafkajs restarts by itself when `restart` is true; otherwise start over with a fresh consumer.
      if (!e.payload.restart && !this.#stopping) {
        setTimeout(() => {
          if (this.#stopping) return;
          void consumer
            .disconnect()
            .catch(() => {})
            .then(() => this.start())
            .catch((err: unknown) => this.#o.logger.error({ err }, 'drainer restart failed'));
        }, 1000);
      }
    });
    await consumer.connect();
    await consumer.subscribe({ topic: this.#o.topic, fromBeginning: true });
    await consumer.run({
      eachBatchAutoResolve: false,
      autoCommit: true,
      autoCommitInterval: 500,
      partitionsConsumedConcurrently: 64,
      eachBatch: (p) => this.#eachBatch(p),
    });
  }

  async #eachBatch({
    batch,
    resolveOffset,
    heartbeat,
    isRunning,
    isStale,
    commitOffsetsIfNecessary,
  }: EachBatchPayload): Promise<void> {
    const { engine, logger, producer } = this.#o;
    // Records are parsed only when offered: a blocked tenant's records after its first are
    // skipped by their key and re-appended as they were read (a flood's look-ahead costs no parse,
    // body decode or serialisation per record per pass).
    const unreadable = (m: { offset: string }) =>
      logger.error({ partition: batch.partition, offset: m.offset }, 'unreadable spill record skipped');
    const entries: Entry[] = [];
    for (const m of batch.messages) {
      const e: Entry = {
        offset: m.offset,
        tenantId: m.key?.toString() ?? '',
        raw: m.value ?? Buffer.alloc(0),
        task: undefined,
        state: 'new',
        settle: () => {
          e.state = 'done';
          wake();
        },
      };
      // A record without a key (none is written so) is read at once for its tenant.
      if (e.tenantId === '' && !taskOf(e)) unreadable(m);
      entries.push(e);
    }
    const started = Date.now();
    // kafkajs's highWatermark is the partition's next offset when the batch was fetched.
    const lastOffset = entries.length > 0 ? BigInt(entries.at(-1)!.offset) : -1n;
    // When the look-ahead's last record was written: a record behind it was written after.
    const lastWritten = Number(batch.messages.at(-1)?.timestamp ?? started);
    /** Records wait behind the look-ahead (anyone's). */
    let behind = BigInt(batch.highWatermark) - 1n > lastOffset;
    /** Some of them are another tenant's than the blocked ones (see #othersBehind). */
    let othersBehind = false;
    let lastPoll = started;
    spillLookaheadRecords.inc(entries.length);
    let unresolved = entries.length;
    let progressed = false;
    const blockedWait = this.#blockedWait.get(batch.partition) ?? BLOCKED_WAIT_MS;
    let idx = 0;
    let wake: () => void = () => {};
    const unsub = engine.onWake(() => wake());
    try {
      // Config of every tenant in the look-ahead, so admission decisions are synchronous.
      const tenants = [...new Set(entries.flatMap((e) => (e.state === 'new' ? [e.tenantId] : [])))];
      const loaded = await retryForever(
        async () => {
          await Promise.all(tenants.map((t) => engine.view(t)));
        },
        async (err, attempt) => {
          if (!isRunning() || isStale() || this.#stopping) return false;
          logger.warn({ err, attempt }, 'drainer cannot load tenant config; waiting');
          await heartbeat().catch(() => {});
        },
      );
      if (!loaded) return;
      for (;;) {
        // Stopping or revoked: admit nothing more, but let admitted tasks finish so their offsets
        // resolve and a graceful leave causes no duplicates (kafkajs waits for this batch).
        const leaving = !isRunning() || isStale() || this.#stopping;
        if (leaving && !entries.some((e) => e.state === 'running')) break;
        // One refusal per tenant per pass: the rest of a blocked tenant's records are skipped
        // without asking again (a flood's look-ahead must not cost a call per record per wake).
        const refused = new Set<string>();
        for (const e of leaving ? [] : entries) {
          if (e.state !== 'new') continue;
          const tid = e.tenantId;
          if (refused.has(tid)) continue;
          const task = taskOf(e);
          if (!task) {
            unreadable(e);
            continue;
          }
          e.state = 'running';
          const a = engine.tryAdmit(task, e);
          if (a === 'blocked') {
            e.state = 'new';
            refused.add(tid);
            continue;
          }
          progressed = true;
          // In memory (or gone to the DLQ) now: no longer part of the tenant's backlog in Kafka.
          this.#o.counters.add(tid, 'spilled', -1);
          this.admitted++;
          spillAdmittedTotal.inc();
        }
        while (idx < entries.length && entries[idx]!.state === 'done') {
          resolveOffset(entries[idx++]!.offset);
          unresolved--;
          spillLookaheadRecords.dec();
        }
        if (idx === entries.length) break;
        const running = entries.some((e) => e.state === 'running');
        if (!leaving && !running) {
          const waited = Date.now() - started;
          if (
            !othersBehind &&
            !progressed &&
            waited < IDLE_BLOCKED_WAIT_MS &&
            Date.now() - lastPoll >= LATEST_POLL_MS
          ) {
            lastPoll = Date.now();
            if (!behind) {
              const latest = (await this.#latestOffsets(batch.topic))?.get(batch.partition);
              if (latest !== undefined && latest - 1n > lastOffset) behind = true;
            }
            // Behind a flood's look-ahead is mostly more of the flood: re-appending it then moves
            // nothing forward, so only another tenant's record behind hurries the re-append.
            if (behind)
              othersBehind = await this.#othersBehind(batch.topic, batch.partition, entries, lastWritten);
          }
          if (progressed || (othersBehind && waited >= blockedWait) || waited >= IDLE_BLOCKED_WAIT_MS) {
            // Only a re-append for records behind that turned out blocked too lengthens the next wait.
            if (progressed) this.#blockedWait.delete(batch.partition);
            else if (othersBehind && waited < IDLE_BLOCKED_WAIT_MS)
              this.#blockedWait.set(batch.partition, Math.min(MAX_BLOCKED_WAIT_MS, blockedWait * 2));
            const blocked = entries.filter((e) => e.state === 'new');
            // Produce first, then resolve: the old offset stays the owner until the copy is acked.
            // (The tenant's spilled count is unchanged: one record replaces another.)
            await Promise.all(blocked.map((e) => producer.respill(e.tenantId, e.raw)));
            for (const e of blocked) e.state = 'done';
            this.reappended += blocked.length;
            spillReappendedTotal.inc(blocked.length);
            continue;
          }
        }
        await Promise.race([new Promise<void>((r) => (wake = r)), sleep(200)]);
        await heartbeat().catch(() => {});
      }
    } finally {
      unsub();
      // Records not resolved (leaving, revoked) go back to the group: no longer in this look-ahead.
      spillLookaheadRecords.dec(unresolved);
    }
    if (progressed) this.#blockedWait.delete(batch.partition);
    await commitOffsetsIfNecessary().catch(() => {});
  }

  /**
   * Whether a tenant other than the look-ahead's blocked ones spilled to this partition since its
   * last record was written (SpillActivity): then a record behind may be theirs. True when it
   * cannot tell (no activity, offsets unreadable).
   */
  async #othersBehind(topic: string, partition: number, entries: Entry[], since: number): Promise<boolean> {
    const activity = this.#o.activity;
    const partitions = activity ? (await this.#latestOffsets(topic))?.size : undefined;
    if (!activity || !partitions) return true;
    const blocked = new Set(entries.flatMap((e) => (e.state === 'new' ? [e.tenantId] : [])));
    return activity.othersSince(topic, partition, partitions, blocked, since);
  }

  /** Every partition's current high watermark (next offset), polled at most every LATEST_POLL_MS for all partitions. */
  async #latestOffsets(topic: string): Promise<Map<number, bigint> | undefined> {
    const now = Date.now();
    if (!this.#latest || now - this.#latest.at >= LATEST_POLL_MS - 50) {
      this.#admin ??= (async () => {
        const a = this.#o.kafka.admin();
        await a.connect();
        return a;
      })();
      const admin = this.#admin;
      const offsets = (async () => {
        const list = await (await admin).fetchTopicOffsets(topic);
        return new Map(list.map((o) => [o.partition, BigInt(o.high)]));
      })();
      this.#latest = { at: now, offsets };
      offsets.catch(() => {
        // A failed admin may be broken for good (broker restart): connect a fresh one next time.
        if (this.#admin === admin) this.#admin = undefined;
        void admin.then((a) => a.disconnect()).catch(() => {});
      });
    }
    try {
      return await this.#latest.offsets;
    } catch (err) {
      this.#o.logger.debug({ err }, 'cannot read latest spill offsets');
      return undefined;
    }
  }

  async close(): Promise<void> {
    this.#stopping = true;
    await this.#consumer?.disconnect().catch(() => {});
    const admin = this.#admin;
    this.#admin = undefined;
    await admin?.then((a) => a.disconnect()).catch(() => {});
  }
}

import type { Logger } from '@spillway/shared';
import type { Consumer, EachBatchPayload, Kafka } from 'kafkajs';
import type { Engine } from '../engine.ts';
import { type DeliveryTask, taskFromWire, type WireTask } from '../fanout.ts';
import type { SpillProducer } from './producer.ts';

/** A batch whose only remaining tasks are blocked waits this long for credits/resume before re-appending them. */
const BLOCKED_WAIT_MS = 1000;
/** Bytes fetched per partition per batch: this is the look-ahead bound. */
const LOOKAHEAD_BYTES = 256 * 1024;

type State = 'new' | 'running' | 'done';

interface Entry {
  offset: string;
  task: DeliveryTask | undefined;
  state: State;
}

export interface DrainerOptions {
  kafka: Kafka;
  topic: string;
  groupId: string;
  engine: Engine;
  /** Re-appends blocked tasks to the tail of the topic. */
  producer: SpillProducer;
  logger: Logger;
}

/**
 * Brings spilled tasks back into memory as credits free up. One consumer group, so workers share
 * partitions. Per partition batch (the look-ahead, ≤ LOOKAHEAD_BYTES):
 *   - admit every task whose tenant has a credit and is not paused, in offset order; skip the rest;
 *   - resolve offsets only up to the lowest unresolved one (a task is resolved once it left memory
 *     through a durable hand-off, or was re-appended to the tail and acked);
 *   - when nothing is running and only blocked tasks remain, re-append them to the tail (produce
 *     first, then resolve) — at once if the batch made progress for others, after BLOCKED_WAIT_MS
 *     otherwise — so a paused or saturated tenant never holds back another tenant on the partition.
 * While a batch is in progress kafkajs fetches nothing more for that partition, so memory per
 * partition stays at one look-ahead (that is the partition "pause").
 */
export class Drainer {
  readonly #o: DrainerOptions;
  #consumer: Consumer | undefined;
  #stopping = false;
  /** Tasks re-appended to the tail (for stats/tests). */
  reappended = 0;
  admitted = 0;

  constructor(opts: DrainerOptions) {
    this.#o = opts;
  }

  async start(): Promise<void> {
    const consumer = this.#o.kafka.consumer({
      groupId: this.#o.groupId,
      sessionTimeout: 10_000,
      heartbeatInterval: 1000,
      rebalanceTimeout: 30_000,
      maxBytesPerPartition: LOOKAHEAD_BYTES,
      maxWaitTimeInMs: 200,
      retry: { retries: 10, initialRetryTime: 300, maxRetryTime: 5000, restartOnFailure: async () => true },
    });
    this.#consumer = consumer;
    consumer.on(consumer.events.CRASH, (e) => {
      this.#o.logger.warn({ err: (e.payload.error as Error)?.message, restart: e.payload.restart }, 'drainer consumer crashed');
      // kafkajs restarts by itself when `restart` is true; otherwise start over with a fresh consumer.
      if (!e.payload.restart && !this.#stopping) {
        setTimeout(() => {
          if (this.#stopping) return;
          void consumer
            .disconnect()
            .catch(() => {})
            .then(() => this.start())
            .catch((err) => this.#o.logger.error({ err: (err as Error).message }, 'drainer restart failed'));
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

  async #eachBatch({ batch, resolveOffset, heartbeat, isRunning, isStale, commitOffsetsIfNecessary }: EachBatchPayload): Promise<void> {
    const { engine, logger, producer } = this.#o;
    const entries: Entry[] = batch.messages.map((m) => {
      let task: DeliveryTask | undefined;
      try {
        task = taskFromWire(JSON.parse(String(m.value)) as WireTask);
      } catch {
        logger.error({ partition: batch.partition, offset: m.offset }, 'unreadable spill record skipped');
      }
      return { offset: m.offset, task, state: task ? 'new' : 'done' };
    });
    const started = Date.now();
    let progressed = false;
    let idx = 0;
    let wake: () => void = () => {};
    const unsub = engine.onWake(() => wake());
    try {
      // Config of every tenant in the look-ahead, so admission decisions are synchronous.
      for (let attempt = 0; ; attempt++) {
        try {
          await Promise.all([...new Set(entries.flatMap((e) => (e.task ? [e.task.tenantId] : [])))].map((t) => engine.view(t)));
          break;
        } catch (err) {
          if (!isRunning() || isStale() || this.#stopping) return;
          logger.warn({ err: (err as Error).message, attempt }, 'drainer cannot load tenant config; waiting');
          await heartbeat().catch(() => {});
          await sleep(Math.min(200 * 2 ** Math.min(attempt, 4), 3000));
        }
      }
      for (;;) {
        // Stopping or revoked: admit nothing more, but let admitted tasks finish so their offsets
        // resolve and a graceful leave causes no duplicates (kafkajs waits for this batch).
        const leaving = !isRunning() || isStale() || this.#stopping;
        if (leaving && !entries.some((e) => e.state === 'running')) break;
        for (const e of leaving ? [] : entries) {
          if (e.state !== 'new') continue;
          const a = engine.tryAdmit(e.task!);
          if (a === 'blocked') continue;
          progressed = true;
          if (a === 'drop') {
            e.state = 'done';
            continue;
          }
          this.admitted++;
          e.state = 'running';
          void a.then(() => {
            e.state = 'done';
            wake();
          });
        }
        while (idx < entries.length && entries[idx]!.state === 'done') resolveOffset(entries[idx++]!.offset);
        if (idx === entries.length) break;
        const running = entries.some((e) => e.state === 'running');
        if (!leaving && !running && (progressed || Date.now() - started >= BLOCKED_WAIT_MS)) {
          const blocked = entries.filter((e) => e.state === 'new');
          // Produce first, then resolve: the old offset stays the owner until the copy is acked.
          await Promise.all(blocked.map((e) => producer.spill(e.task!)));
          for (const e of blocked) e.state = 'done';
          this.reappended += blocked.length;
          continue;
        }
        await Promise.race([new Promise<void>((r) => (wake = r)), sleep(200)]);
        await heartbeat().catch(() => {});
      }
    } finally {
      unsub();
    }
    await commitOffsetsIfNecessary().catch(() => {});
  }

  async close(): Promise<void> {
    this.#stopping = true;
    await this.#consumer?.disconnect().catch(() => {});
  }
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

import { channels, ListWriter, type Logger, retryForever } from '@spillway/shared';
import { type Kafka, Partitioners, type Producer } from 'kafkajs';
import { spillProducedTotal } from '../metrics.ts';
import { type DeliveryTask, taskToWire, type WireTask } from '../worker/fanout.ts';
import type { SpillActivity } from './activity.ts';

const FLUSH_MS = 2;
/**
 * At least this long from the start of one send to the start of the next: a tenant spilling a
 * steady stream (a flood into an endpoint that hangs) makes one produce per 20 ms, not one per
 * acknowledgement. Each produce has a fixed cost in this worker and in the broker; with sends
 * back to back, a 1,000 events/s flood cost the broker 10–12 % of a core, 7–9 % with this
 * (docs/benchmarks/profile.md, "The flood's spill sends"). A lone spill still goes after FLUSH_MS.
 */
const SPACING_MS = 20;
const MAX_BATCH = 500;
/**
 * Bytes of record values per produce request. Kafka checks a whole record batch against the
 * topic's max.message.bytes, so many large tasks must not share one send; a single record larger
 * than this goes alone (the topic allows up to SPILL_MAX_MESSAGE_BYTES).
 */
const MAX_SEND_BYTES = 128 * 1024;

interface Item {
  /** The tenant: the record's key. */
  key: string;
  /** A task to serialise when its send starts, or a record's value to append as it is. */
  task?: DeliveryTask;
  value?: Buffer;
  resolve: () => void;
}

/**
 * Appends tasks to the spill topic (keyed by tenant, acks=-1, idempotent producer), batched over
 * ≤ 2 ms when idle and one send per ≥ 20 ms when busy. `spill()` resolves only once Kafka
 * acknowledged the record: until then the caller (an intake job, a retry job or the drainer's
 * uncommitted offset) still owns the task. Sends that fail are retried with backoff until they
 * succeed or the producer closes — a broker restart is ridden out without a process restart.
 *
 * One send at a time (the producer allows one request in flight anyway): tasks wait as tasks and
 * are serialized only when their send starts, so a burst of spills (256 intake jobs of a paused
 * tenant) holds at most one request's worth of wire strings and encoded record batches, not the
 * whole burst's (measured: that was hundreds of MiB of young garbage promoted to old space).
 * Tasks that arrive during a send go together in the next one.
 */
export class SpillProducer {
  readonly #kafka: Kafka;
  readonly #topic: string;
  readonly #logger: Logger;
  readonly #activity: SpillActivity | undefined;
  #producer: Producer | undefined;
  #connecting: Promise<Producer> | undefined;
  /** One send at a time; what arrives during a send goes in the next (see above). */
  readonly #writer = new ListWriter<Item>({
    flushMs: FLUSH_MS,
    maxItems: MAX_BATCH,
    serial: true,
    spacingMs: SPACING_MS,
    write: (batch) => this.#sendAll(batch),
  });
  #closed = false;
  /** Records acknowledged by Kafka (for stats/tests). */
  sent = 0;

  /** `activity`: told the tenants of every acknowledged send (the drainer's "who else is behind"). */
  constructor(kafka: Kafka, topic: string, logger: Logger, activity?: SpillActivity) {
    this.#kafka = kafka;
    this.#topic = topic;
    this.#logger = logger;
    this.#activity = activity;
  }

  spill(task: DeliveryTask): Promise<void> {
    if (this.#closed) return Promise.reject(new Error('spill producer closed'));
    return new Promise<void>((resolve) => {
      this.#writer.add({ key: task.tenantId, task, resolve });
    });
  }

  /**
   * Appends a spill record again exactly as it was read (the drainer's blocked look-ahead, which
   * never parsed it): no parse, body decode or serialisation. Resolves like `spill()`.
   */
  respill(tenantId: string, value: Buffer): Promise<void> {
    if (this.#closed) return Promise.reject(new Error('spill producer closed'));
    return new Promise<void>((resolve) => {
      this.#writer.add({ key: tenantId, value, resolve });
    });
  }

  async #connect(): Promise<Producer> {
    if (this.#producer) return this.#producer;
    this.#connecting ??= (async () => {
      const p = this.#kafka.producer({
        idempotent: true,
        maxInFlightRequests: 1,
        allowAutoTopicCreation: false,
        // Named, not left to kafkajs's default: the drainer computes a tenant's partition with the
        // same partitioner (activity.ts, partitionOf).
        createPartitioner: Partitioners.DefaultPartitioner,
      });
      try {
        await p.connect();
      } catch (err) {
        this.#connecting = undefined;
        await p.disconnect().catch(() => {});
        throw err;
      }
      this.#producer = p;
      return p;
    })();
    return this.#connecting;
  }

  /** Sends one taken batch in requests of ≤ MAX_SEND_BYTES of values, one after the other. */
  async #sendAll(batch: Item[]): Promise<void> {
    let i = 0;
    let next: string | Buffer | undefined;
    while (i < batch.length) {
      const items: Item[] = [];
      const values: (string | Buffer)[] = [];
      let bytes = 0;
      for (; i < batch.length; i++) {
        const it = batch[i]!;
        const value = next ?? it.value ?? JSON.stringify(taskToWire(it.task!));
        next = undefined;
        // A record larger than the limit goes alone; otherwise it starts the next send.
        if (bytes > 0 && bytes + value.length > MAX_SEND_BYTES) {
          next = value;
          break;
        }
        items.push(it);
        values.push(value);
        bytes += value.length;
      }
      await this.#send(items, values, bytes);
    }
  }

  async #send(batch: Item[], values: (string | Buffer)[], bytes: number): Promise<void> {
    const messages = batch.map((it, i) => ({ key: it.key, value: values[i]! }));
    await retryForever(
      async () => {
        const producer = await this.#connect();
        await producer.send({ topic: this.#topic, acks: -1, messages });
        this.sent += batch.length;
        spillProducedTotal.inc(batch.length);
        this.#activity?.note(batch.map((it) => it.key));
        if (channels.spill.hasSubscribers) {
          channels.spill.publish({
            records: batch.length,
            bytes,
            tasks: batch.map((it, i) => {
              if (it.task)
                return { tenantId: it.key, eventId: it.task.eventId, endpointId: it.task.endpointId };
              // A re-appended record is read here only for the listener (a diagnostic).
              let w: WireTask | undefined;
              try {
                w = JSON.parse(values[i]!.toString()) as WireTask;
              } catch {}
              return { tenantId: it.key, eventId: w?.e?.i ?? '', endpointId: w?.p ?? '' };
            }),
          });
        }
        for (const it of batch) it.resolve();
      },
      async (err, attempt) => {
        if (this.#closed && attempt > 2) {
          // Shutting down: the owners keep their tasks (their jobs/offsets are not resolved).
          this.#logger.warn(
            { err, records: batch.length },
            'spill abandoned at shutdown; owners keep the tasks',
          );
          return false;
        }
        this.#logger.warn({ err, attempt }, 'spill send failed; retrying');
        // A producer whose broker went away may be stuck: start a fresh one after a few failures.
        if (attempt % 3 === 2) {
          const old = this.#producer;
          this.#producer = undefined;
          this.#connecting = undefined;
          await old?.disconnect().catch(() => {});
        }
      },
    );
  }

  async close(): Promise<void> {
    // Everything handed in before the producer is closed is sent (or abandoned below).
    do await this.#writer.flush();
    while (this.#writer.busy);
    this.#closed = true;
    await this.#producer?.disconnect().catch(() => {});
  }
}

import type { FailureReason } from '@spillway/delivery';
import { type Endpoint, type Keys, type Logger, type RedisClient, retryForever } from '@spillway/shared';
import type { AttemptRecord, AttemptState } from '../history/wire.ts';
import type { HistoryWriter } from '../history/writer.ts';
import { dlqWritesTotal, tasksDiscardedTotal } from '../metrics.ts';
import type { TenantCounters } from '../records/counters.ts';
import { pushDlq } from '../records/records.ts';
import type { RetryScheduler } from '../retry/scheduler.ts';
import { type AttemptOutcome, type DeliveryPort, retrySchedule } from './deliver.ts';
import type { DeliveryTask } from './fanout.ts';

/**
 * An attempt this long after its event was accepted is past where the event view looks for first
 * attempts (the tenant's next few attempt minutes): it is indexed with the later attempts.
 */
const LATE_ATTEMPT_MS = 120_000;

/** A task whose attempt this worker's shutdown ended is retried this soon, at the same attempt number. */
const SHUTDOWN_RETRY_MS = 1000;

/** Why a task went to the DLQ without (another) attempt. Every one stays replayable. */
export type DeadLetterReason = 'endpoint_disabled';

/** Why a task was discarded: its tenant or endpoint was deleted (the one explicit exception to "never drop"). */
export type DiscardReason = 'tenant_deleted' | 'endpoint_deleted';

export interface SettleDeps {
  redis: RedisClient;
  keys: Keys;
  logger: Logger;
  delivery: DeliveryPort;
  retries: RetryScheduler;
  counters: TenantCounters;
  retryScheduleMs: readonly number[];
  /**
   * Keeps each tenant's DLQ at most `cap` entries (dlq-archive.ts): told after each DLQ write
   * (nothing waits for that), and waited for when a write found the list full.
   */
  dlqArchiver?: {
    cap: number;
    pushed(tenantId: string, length: number): void;
    makeRoom(tenantId: string): Promise<void>;
  };
  /** The attempt history (docs/storage.md); each attempt is handed to it, nothing waits for it. */
  history?: HistoryWriter;
  /** A 410 Gone means the receiver is gone for good: the endpoint is disabled (no more fan-out to it). */
  disableEndpoint?: (tenantId: string, endpointId: string, reason: string) => Promise<void>;
}

/**
 * The ordered store as the settler sees it (ordering/store.ts): where a task of a per-key ordered
 * endpoint (`task.seq` set) goes instead of a retry job, and what finishes it so the next of its
 * key may start.
 */
export interface OrderedHandOff {
  done(task: DeliveryTask): Promise<void>;
  backoff(next: DeliveryTask, delayMs: number): Promise<void>;
}

/** What the tasks of one batch share while each is settled (Settler#outcomes). */
interface BatchSettle {
  /** Retry delay by attempt number (undefined: that attempt was the last). */
  delays: Map<number, number | undefined>;
  disabling?: Promise<void>;
}

/** This worker's per-tenant totals since it started (published with its stats). */
export interface LocalCounts {
  spilled: number;
  retrying: number;
  delivered: number;
  failed: number;
  endpoints: Record<string, { delivered: number; failed: number }>;
}

/**
 * Turns an attempt's outcome into the task's next durable owner: delivered (a record), a retry job,
 * or a DLQ entry. Each method resolves once that owner has the task; only then may the caller give
 * back the task's credit and settle it with its current owner.
 */
export class Settler {
  readonly #d: SettleDeps;
  readonly #local = new Map<string, LocalCounts>();
  #ordered: OrderedHandOff | undefined;

  constructor(deps: SettleDeps) {
    this.#d = deps;
  }

  /** The worker's ordered store (created after the engine, which it needs). */
  setOrdered(o: OrderedHandOff): void {
    this.#ordered = o;
  }

  /** The ordered store, for a task it owns (`seq` set); undefined for every other task. */
  #store(task: DeliveryTask): OrderedHandOff | undefined {
    return task.seq === undefined ? undefined : this.#ordered;
  }

  local(tenantId: string): LocalCounts {
    let c = this.#local.get(tenantId);
    if (!c) {
      c = { spilled: 0, retrying: 0, delivered: 0, failed: 0, endpoints: {} };
      this.#local.set(tenantId, c);
    }
    return c;
  }

  tenants(): IterableIterator<string> {
    return this.#local.keys();
  }

  #ep(tenantId: string, endpointId: string): { delivered: number; failed: number } {
    const c = this.local(tenantId);
    c.endpoints[endpointId] ??= { delivered: 0, failed: 0 };
    return c.endpoints[endpointId];
  }

  /**
   * After an attempt (or a refusal before one: breaker open). `endpoint` (as the attempt saw it)
   * gives the retry policy; without it, or without its own `retry`, SPILLWAY_RETRY_SCHEDULE applies.
   * Undefined once the task has its next owner already (a delivery outside per-key ordering: its
   * records are buffered, nothing to wait for), else a promise that resolves when it has one. Not
   * async: the delivered path is most of a worker's calls, and a promise and a microtask turn each
   * for nothing were part of its per-delivery cost (docs/benchmarks/profile.md).
   */
  outcome(
    task: DeliveryTask,
    outcome: AttemptOutcome,
    endpoint?: Endpoint,
    batch?: BatchSettle,
  ): Promise<void> | undefined {
    if (outcome.kind !== 'delivered') return this.#notDelivered(task, outcome, endpoint, batch);
    this.#history(task, outcome, 'delivered');
    this.local(task.tenantId).delivered++;
    this.#ep(task.tenantId, task.endpointId).delivered++;
    this.#d.counters.add(task.tenantId, 'delivered', 1, task.endpointId);
    return this.#store(task)?.done(task);
  }

  async #notDelivered(
    task: DeliveryTask,
    outcome: Exclude<AttemptOutcome, { kind: 'delivered' }>,
    endpoint?: Endpoint,
    batch?: BatchSettle,
  ): Promise<void> {
    const d = this.#d;
    if (outcome.kind === 'deferred') {
      // No attempt was made (breaker open): same attempt number, later.
      await this.#retry(task, outcome.retryAfterMs);
      return;
    }
    if (outcome.kind === 'retry' && outcome.error === 'shutdown') {
      // Ended by this worker's shutdown, not by the endpoint: not an attempt, back on in a second.
      await this.#retry(task, SHUTDOWN_RETRY_MS);
      return;
    }
    let delay: number | undefined;
    if (outcome.kind === 'retry') {
      if (batch?.delays.has(task.attempt)) delay = batch.delays.get(task.attempt);
      else {
        const plan = retrySchedule(endpoint?.retry, d.retryScheduleMs);
        delay = d.delivery.nextRetryDelay(
          plan.scheduleMs,
          task.attempt,
          outcome.retryAfterMs,
          plan.maxAttempts,
        );
        batch?.delays.set(task.attempt, delay);
      }
    }
    if (delay !== undefined) {
      await this.#retry({ ...task, attempt: task.attempt + 1 }, delay);
      this.#history(task, outcome, 'retrying', Date.now() + delay);
      return;
    }
    if (outcome.kind === 'fail' && outcome.error === 'gone' && d.disableEndpoint) {
      const disable = () =>
        d.disableEndpoint!(task.tenantId, task.endpointId, 'gone').catch((err) =>
          d.logger.warn(
            { err, tenantId: task.tenantId, endpointId: task.endpointId },
            'could not disable a gone endpoint',
          ),
        );
      if (batch) {
        batch.disabling ??= disable();
        await batch.disabling;
      } else await disable();
    }
    await this.deadLetter(task, outcome.error);
    this.#history(task, outcome, 'failed');
    // A dead-lettered head is skipped: the next event of its key starts.
    await this.#store(task)?.done(task);
  }

  /**
   * A batch's outcome for each of its tasks (one request carried them all). Tasks of one attempt
   * number get one delay, so a retried batch comes back in one retry job; a 410 disables the
   * endpoint once. Resolves when every task has its next owner.
   */
  async outcomes(tasks: readonly DeliveryTask[], outcome: AttemptOutcome, endpoint: Endpoint): Promise<void> {
    if (tasks.length === 1) return this.outcome(tasks[0]!, outcome, endpoint);
    const batch: BatchSettle = { delays: new Map() };
    await Promise.all(tasks.map((t) => this.outcome(t, outcome, endpoint, batch)));
  }

  /** Hands the attempt to the history writer (batched; nothing waits for it). */
  #history(
    task: DeliveryTask,
    outcome: Exclude<AttemptOutcome, { kind: 'deferred' }> | { kind: 'parked'; error: DeadLetterReason },
    o: AttemptState,
    next?: number,
  ): void {
    const h = this.#d.history;
    if (!h) return;
    const a: AttemptRecord = {
      t: task.tenantId,
      i: task.eventId,
      p: task.endpointId,
      n: task.attempt,
      at: Date.now(),
      ms: 'durationMs' in outcome ? (outcome.durationMs ?? 0) : 0,
      o,
    };
    if ('status' in outcome && outcome.status !== undefined) a.st = outcome.status;
    if ('error' in outcome) a.er = outcome.error;
    if ('excerpt' in outcome && outcome.excerpt && outcome.excerpt.length > 0)
      a.x = outcome.excerpt.toString('utf8');
    if (next !== undefined) a.nx = next;
    if (task.resend !== undefined) a.rs = task.resend;
    if (a.at - task.event.receivedAt > LATE_ATTEMPT_MS) a.lt = 1;
    h.attempt(a);
  }

  async #retry(task: DeliveryTask, delayMs: number): Promise<void> {
    const store = this.#store(task);
    if (store) {
      // An ordered task waits in the store, holding back its key (nothing behind it starts).
      await store.backoff(task, delayMs);
      return;
    }
    await this.#d.retries.schedule(task, delayMs);
    this.local(task.tenantId).retrying++;
    this.#d.counters.add(task.tenantId, 'retrying', 1);
  }

  /** Parks the task in its tenant's DLQ (retried until Redis takes it) and counts it failed. */
  async deadLetter(task: DeliveryTask, lastError: FailureReason | DeadLetterReason): Promise<void> {
    const entry = {
      eventId: task.eventId,
      endpointId: task.endpointId,
      attempts: task.attempt,
      lastError,
      failedAt: new Date().toISOString(),
    };
    const archiver = this.#d.dlqArchiver;
    let length = 0;
    await retryForever(
      async () => {
        // A full list takes nothing (the cap is hard): archive its oldest first, then write.
        for (;;) {
          length = await pushDlq(this.#d.redis, this.#d.keys, task, entry, archiver?.cap);
          if (length >= 0 || !archiver) return;
          await archiver.makeRoom(task.tenantId);
        }
      },
      (err, attempt) => void this.#d.logger.warn({ err, attempt }, 'DLQ write failed; retrying'),
    );
    archiver?.pushed(task.tenantId, length);
    dlqWritesTotal.inc();
    this.local(task.tenantId).failed++;
    this.#ep(task.tenantId, task.endpointId).failed++;
    this.#d.counters.add(task.tenantId, 'failed', 1, task.endpointId);
  }

  /** A task whose endpoint is disabled: to the DLQ, replayable once the endpoint is resumed. */
  async parked(task: DeliveryTask, reason: DeadLetterReason): Promise<void> {
    this.#history(task, { kind: 'parked', error: reason }, 'failed');
    await this.deadLetter(task, reason);
    await this.#store(task)?.done(task);
  }

  /**
   * A task of a deleted tenant or endpoint: counted, logged, and gone. `stale`: its endpoint (or
   * tenant) was deleted and created again under the same id since the task was made (the task's
   * gen is an earlier incarnation's); counted as `reason` too, and logged at info, since the new
   * owner's operator may wonder where the old events went.
   */
  discard(task: DeliveryTask, reason: DiscardReason, stale = false): void {
    // An ordered key of a deleted endpoint or tenant drains this way, one discard at a time.
    void this.#store(task)
      ?.done(task)
      .catch((err) => this.#d.logger.warn({ err, eventId: task.eventId }, 'ordered discard not recorded'));
    tasksDiscardedTotal.inc({ reason });
    const at = { tenantId: task.tenantId, endpointId: task.endpointId, eventId: task.eventId, reason };
    if (stale)
      this.#d.logger.info(
        { ...at, gen: task.gen },
        'task of an earlier incarnation of its endpoint discarded',
      );
    else this.#d.logger.debug(at, 'task discarded');
  }

  /** A task handed to the spill log (counted once Kafka has it). */
  spilled(tenantId: string): void {
    this.local(tenantId).spilled++;
    this.#d.counters.add(tenantId, 'spilled', 1);
  }
}

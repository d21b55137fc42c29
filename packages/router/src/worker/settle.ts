import {
  type DeliveryRecord,
  type Keys,
  type Logger,
  type RedisClient,
  retryForever,
} from '@spillway/shared';
import { dlqWritesTotal, tasksDiscardedTotal } from '../metrics.ts';
import type { TenantCounters } from '../records/counters.ts';
import { pushDlq, type RecordWriter } from '../records/records.ts';
import type { RetryScheduler } from '../retry/scheduler.ts';
import type { AttemptOutcome, DeliveryPort } from './deliver.ts';
import type { DeliveryTask } from './fanout.ts';

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
  records: RecordWriter;
  counters: TenantCounters;
  retryScheduleMs: readonly number[];
  /** A 410 Gone means the receiver is gone for good: the endpoint is disabled (no more fan-out to it). */
  disableEndpoint?: (tenantId: string, endpointId: string, reason: string) => Promise<void>;
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

  constructor(deps: SettleDeps) {
    this.#d = deps;
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

  /** After an attempt (or a refusal before one: breaker open). */
  async outcome(task: DeliveryTask, outcome: AttemptOutcome): Promise<void> {
    const d = this.#d;
    const rec: DeliveryRecord = { endpointId: task.endpointId, status: 'pending', attempts: task.attempt };
    if ('status' in outcome && outcome.status !== undefined) rec.lastStatus = outcome.status;
    if (outcome.kind === 'delivered') {
      rec.status = 'delivered';
      d.records.attempt(task, rec);
      this.local(task.tenantId).delivered++;
      this.#ep(task.tenantId, task.endpointId).delivered++;
      d.counters.add(task.tenantId, 'delivered', 1, task.endpointId);
      return;
    }
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
    rec.lastError = outcome.error;
    const delay =
      outcome.kind === 'retry'
        ? d.delivery.nextRetryDelay(d.retryScheduleMs, task.attempt, outcome.retryAfterMs)
        : undefined;
    if (delay !== undefined) {
      rec.status = 'retrying';
      await this.#retry({ ...task, attempt: task.attempt + 1 }, delay);
      d.records.attempt(task, rec);
      return;
    }
    rec.status = 'failed';
    if (outcome.kind === 'fail' && outcome.error === 'gone' && d.disableEndpoint) {
      await d
        .disableEndpoint(task.tenantId, task.endpointId, 'gone')
        .catch((err) =>
          d.logger.warn(
            { err, tenantId: task.tenantId, endpointId: task.endpointId },
            'could not disable a gone endpoint',
          ),
        );
    }
    await this.deadLetter(task, outcome.error);
    d.records.attempt(task, rec);
  }

  async #retry(task: DeliveryTask, delayMs: number): Promise<void> {
    await this.#d.retries.schedule(task, delayMs);
    this.local(task.tenantId).retrying++;
    this.#d.counters.add(task.tenantId, 'retrying', 1);
  }

  /** Parks the task in its tenant's DLQ (retried until Redis takes it) and counts it failed. */
  async deadLetter(task: DeliveryTask, lastError: string): Promise<void> {
    const entry = {
      eventId: task.eventId,
      endpointId: task.endpointId,
      attempts: task.attempt,
      lastError,
      failedAt: new Date().toISOString(),
    };
    await retryForever(
      () => pushDlq(this.#d.redis, this.#d.keys, task, entry),
      (err, attempt) => void this.#d.logger.warn({ err, attempt }, 'DLQ write failed; retrying'),
    );
    dlqWritesTotal.inc();
    this.local(task.tenantId).failed++;
    this.#ep(task.tenantId, task.endpointId).failed++;
    this.#d.counters.add(task.tenantId, 'failed', 1, task.endpointId);
  }

  /** A task whose endpoint is disabled: to the DLQ, replayable once the endpoint is resumed. */
  parked(task: DeliveryTask, reason: DeadLetterReason): Promise<void> {
    this.#d.records.attempt(task, {
      endpointId: task.endpointId,
      status: 'failed',
      attempts: task.attempt - 1,
      lastError: reason,
    });
    return this.deadLetter(task, reason);
  }

  /** A task of a deleted tenant or endpoint: counted, logged, and gone. */
  discard(task: DeliveryTask, reason: DiscardReason): void {
    tasksDiscardedTotal.inc({ reason });
    this.#d.logger.debug(
      { tenantId: task.tenantId, endpointId: task.endpointId, eventId: task.eventId, reason },
      'task discarded',
    );
  }

  /** A task handed to the spill log (counted once Kafka has it). */
  spilled(tenantId: string): void {
    this.local(tenantId).spilled++;
    this.#d.counters.add(tenantId, 'spilled', 1);
  }
}

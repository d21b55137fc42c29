import { randomBytes } from 'node:crypto';
import {
  channels,
  createQueue,
  errors,
  type Intake,
  JOB_OPTS,
  type Keys,
  type Logger,
  type RedisClient,
  type SpillwayEvent,
  tenantTag,
  withTimeout,
} from '@spillway/shared';
import type { Queue } from 'bullmq';
import { type PipeCommands, type RouterCommands, withCommands } from '../commands/index.ts';
import { intakeBatchEvents, intakeBatchesTotal, intakeCommitSeconds, intakeEventsTotal } from '../metrics.ts';
import { firstError, groupByTenant, type PipeResult, pipelineByTag } from '../records/pipeline.ts';
import { RECORD_TTL_S, recordMeta } from '../records/records.ts';
import { eventToWire, type WireEvent } from '../worker/fanout.ts';

/** Data of one intake job: a group-committed batch of accepted events. */
export type IntakeJobData = { v: 1; events: WireEvent[] };

/** Largest batch one group commit makes durable. */
const MAX_BATCH = 256;
/**
 * Group commits in flight at once before new events wait for the timer. While fewer are in flight,
 * a batch goes out at the end of the current event-loop turn (every submit of that turn joins it)
 * instead of waiting groupCommitMs; while they are, events accumulate and go out when one finishes
 * (or when the timer fires, whichever is first). Under load the batch is what arrived during one
 * commit's round trips, without a fixed wait in front of each.
 */
const MAX_COMMITS_IN_FLIGHT = 1;
/** How long a "pending" marker lives: long enough for one commit, short enough that a crash frees the id soon. */
const PENDING_TTL_MS = 30_000;
/** How long a submit waits for another process's pending marker to settle before answering 503. */
const FOREIGN_PENDING_WAIT_MS = 1500;
/** A commit that has not finished by then answers 503 (the job may still land; the worker then marks the ids done). */
const COMMIT_TIMEOUT_MS = 3000;
const DONE = 'd';

export interface IntakeOptions {
  redis: RedisClient;
  keys: Keys;
  logger: Logger;
  dedupWindowMs: number;
  groupCommitMs: number;
}

interface Pending {
  event: SpillwayEvent;
  key: string;
  resolve: (r: { id: string; duplicate: boolean }) => void;
  reject: (err: unknown) => void;
}

/**
 * The durable intake: collects submitted events for ≤ groupCommitMs (or MAX_BATCH events; at once
 * when no commit is in flight, see MAX_COMMITS_IN_FLIGHT) and makes the batch durable as ONE BullMQ job; each caller resolves only after Redis acknowledged it.
 *
 * Dedup never lets a marker claim "done" for an event that is not durable: markers are reserved as
 * `p:<token>` (short TTL) before the job is added, promoted to `d` with the full window after, and
 * released if the add failed. A duplicate in this process waits on the first submit's promise; a
 * duplicate that finds another process's pending marker waits briefly for it, then answers 503.
 * See docs/architecture.md ("Dedup").
 */
export class DurableIntake implements Intake {
  readonly #redis: RedisClient & RouterCommands;
  readonly #keys: Keys;
  readonly #logger: Logger;
  readonly #queue: Queue;
  readonly #windowMs: number;
  readonly #groupMs: number;
  readonly #inflight = new Map<string, Promise<{ id: string; duplicate: boolean }>>();
  #batch: Pending[] = [];
  #timer: NodeJS.Timeout | undefined;
  #soon: NodeJS.Immediate | undefined;
  #committing = 0;
  #closed = false;

  constructor(opts: IntakeOptions) {
    this.#redis = withCommands(opts.redis);
    this.#keys = opts.keys;
    this.#logger = opts.logger;
    this.#windowMs = opts.dedupWindowMs;
    this.#groupMs = opts.groupCommitMs;
    this.#queue = createQueue(opts.redis, opts.keys, opts.keys.intakeQueue, opts.logger);
  }

  submit(event: SpillwayEvent): Promise<{ id: string; duplicate: boolean }> {
    if (this.#closed) return Promise.reject(errors.unavailable('intake is shutting down', { retryAfter: 1 }));
    const key = this.#keys.dedup(event.tenantId, event.id);
    const first = this.#inflight.get(key);
    if (first) {
      // Same id already on its way in this process: the answer is "duplicate" once the first is
      // durable, and the first's error otherwise.
      return first.then(
        (r) => {
          intakeEventsTotal.inc({ result: 'duplicate' });
          return { id: r.id, duplicate: true };
        },
        (err) => {
          intakeEventsTotal.inc({ result: 'rejected' });
          throw err;
        },
      );
    }
    const p = new Promise<{ id: string; duplicate: boolean }>((resolve, reject) => {
      this.#batch.push({ event, key, resolve, reject });
    });
    p.then(
      (r) => intakeEventsTotal.inc({ result: r.duplicate ? 'duplicate' : 'accepted' }),
      () => intakeEventsTotal.inc({ result: 'rejected' }),
    );
    this.#inflight.set(key, p);
    const clear = () => {
      if (this.#inflight.get(key) === p) this.#inflight.delete(key);
    };
    p.then(clear, clear);
    if (this.#batch.length >= MAX_BATCH) this.#flush();
    else if (this.#committing < MAX_COMMITS_IN_FLIGHT) this.#soon ??= setImmediate(() => this.#flush());
    else this.#timer ??= setTimeout(() => this.#flush(), this.#groupMs);
    return p;
  }

  #flush(): void {
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = undefined;
    if (this.#soon) clearImmediate(this.#soon);
    this.#soon = undefined;
    const batch = this.#batch;
    this.#batch = [];
    if (batch.length === 0) return;
    this.#committing++;
    void this.#commit(batch)
      .catch((err: unknown) => this.#logger.error({ err }, 'intake commit threw'))
      .finally(() => {
        this.#committing--;
        // Events that arrived during this commit go out now rather than after the timer.
        if (this.#batch.length > 0 && this.#committing < MAX_COMMITS_IN_FLIGHT) this.#flush();
      });
  }

  async #commit(batch: Pending[]): Promise<void> {
    const marker = `p:${randomBytes(8).toString('hex')}`;
    const started = performance.now();
    const endTimer = intakeCommitSeconds.startTimer();
    intakeBatchEvents.observe(batch.length);
    let reserved: Pending[] = [];
    let added = false;
    try {
      await withTimeout(
        (async () => {
          // One Lua call per tenant (its keys share one slot), all in one pipeline on standalone
          // Redis, one pipeline per tenant on a Redis Cluster.
          const groups = groupByTenant(batch, (p) => p.event.tenantId);
          const res = await pipelineByTag(
            this.#redis,
            groups,
            ([tenantId]) => tenantTag(tenantId),
            (pipe, [, ps]) =>
              (pipe as unknown as PipeCommands).dedupReserve(
                ps.length,
                ...ps.map((p) => p.key),
                marker,
                PENDING_TTL_MS,
              ),
          );
          const foreign: Pending[] = [];
          let failed: Error | undefined;
          groups.forEach(([, ps], g) => {
            const [err, olds] = res[g]![0] ?? [new Error('pipeline aborted'), null];
            if (err) {
              failed ??= err;
              // The script may have set some markers before it failed: release them with the rest
              // (dedupRelease deletes a marker only if it is still ours).
              for (const p of ps) reserved.push(p);
              return;
            }
            ps.forEach((p, k) => {
              const old = (olds as (string | number)[])[k];
              if (old === 0) reserved.push(p);
              else if (old === DONE) p.resolve({ id: p.event.id, duplicate: true });
              else foreign.push(p);
            });
          });
          // A tenant's pipeline failed (its node is down): the whole batch answers 503, and every
          // marker we did reserve is released in the catch below.
          if (failed) throw failed;
          for (const p of foreign) void this.#awaitForeign(p);
          if (reserved.length === 0) {
            intakeBatchesTotal.inc({ outcome: 'duplicate' });
            publishCommit(batch.length, 'duplicate', started, []);
            return;
          }
          const data: IntakeJobData = { v: 1, events: reserved.map((p) => eventToWire(p.event)) };
          await this.#queue.add('batch', data, JOB_OPTS);
          added = true;
        })(),
        COMMIT_TIMEOUT_MS,
      );
    } catch (err) {
      this.#logger.warn({ err, events: batch.length }, 'intake commit failed');
      intakeBatchesTotal.inc({ outcome: added ? 'committed' : 'failed' });
      endTimer();
      publishCommit(batch.length, added ? 'committed' : 'failed', started, added ? reserved : [], err);
      const failure = errors.unavailable('durable storage cannot take the event right now', {
        cause: err,
        retryAfter: 1,
      });
      if (added) {
        // Durable after all (the timeout fired late): answer truthfully.
        for (const p of reserved) p.resolve({ id: p.event.id, duplicate: false });
        reserved = [];
      }
      for (const p of reserved) void this.#redis.dedupRelease(p.key, marker).catch(() => {});
      for (const p of batch) p.reject(failure); // no-op for the ones already settled
      return;
    }
    if (reserved.length === 0) return;
    // Durable. Before answering, promote the markers to the full window and write each event's
    // record, so a GET right after the 202 finds the event (its deliveries appear at fan-out).
    // Neither write owns anything: if they fail the answer is still 202, and the worker promotes
    // the markers and writes the record (fanoutRecords) when it processes the job.
    const promoted = await acceptEvents(
      this.#redis,
      this.#keys,
      reserved.map((p) => ({
        tenantId: p.event.tenantId,
        eventId: p.event.id,
        meta: recordMeta(p.event.id, p.event.type, p.event.receivedAt),
      })),
      this.#windowMs,
    );
    const promoteErr = firstError(promoted);
    if (promoteErr) this.#logger.warn({ err: promoteErr }, 'dedup promote failed; worker will promote');
    intakeBatchesTotal.inc({ outcome: 'committed' });
    endTimer();
    publishCommit(batch.length, 'committed', started, reserved);
    for (const p of reserved) p.resolve({ id: p.event.id, duplicate: false });
  }

  /** Another process holds a pending marker for this id: wait for it to become done (duplicate) or give up with 503. */
  async #awaitForeign(p: Pending): Promise<void> {
    const deadline = Date.now() + FOREIGN_PENDING_WAIT_MS;
    try {
      while (Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 50));
        const v = await this.#redis.get(p.key);
        if (v === DONE) return p.resolve({ id: p.event.id, duplicate: true });
        if (v === null) break;
      }
    } catch {
      // fall through to 503
    }
    p.reject(errors.unavailable('the same event id is being accepted elsewhere; retry', { retryAfter: 1 }));
  }

  async close(): Promise<void> {
    this.#closed = true;
    this.#flush();
    await Promise.allSettled([...this.#inflight.values()]);
    await this.#queue.close().catch(() => {});
  }
}

/** One event of an intake job at fan-out: its meta and the endpoints it goes to. */
export interface FannedOutEvent {
  tenantId: string;
  eventId: string;
  /** Record meta JSON (recordMeta). */
  meta: string;
  endpointIds: readonly string[];
}

/**
 * At fan-out, one Lua call per tenant (`commands/events-fanout-2n.lua`, pipelined): each event is
 * made sure of as accepted (dedup marker done, record meta — covers an intake whose promote was
 * lost after a durable add) and gets a pending record per endpoint unless it has one. Best-effort
 * like every record write: it owns nothing.
 */
export async function fanoutRecords(
  redis: RedisClient,
  keys: Keys,
  events: readonly FannedOutEvent[],
  windowMs: number,
): Promise<void> {
  const r = withCommands(redis);
  const res = await pipelineByTag(
    r,
    groupByTenant(events, (e) => e.tenantId),
    ([tenantId]) => tenantTag(tenantId),
    (pipe, [tenantId, evs]) => {
      const ks: string[] = [];
      const args: (string | number)[] = [windowMs, RECORD_TTL_S];
      for (const e of evs) {
        ks.push(keys.dedup(tenantId, e.eventId), keys.event(tenantId, e.eventId));
        args.push(e.meta, JSON.stringify(e.endpointIds));
      }
      (pipe as unknown as PipeCommands).eventsFanout(ks.length, ...ks, ...args);
    },
  );
  const err = firstError(res);
  if (err) throw err;
}

/** One event made durable: its dedup marker is promoted and its record (meta) created. */
export interface AcceptedEvent {
  tenantId: string;
  eventId: string;
  /** Record meta JSON (recordMeta). */
  meta: string;
}

/**
 * Promotes the dedup markers of durable events to "done" for the window and creates their records
 * (`commands/events-accept-2n.lua`): ONE Lua call per tenant, one pipeline on standalone Redis.
 * Idempotent (HSETNX). The per-endpoint pending records are the worker's, written at fan-out.
 * Returns pipelineByTag's per-tenant results.
 */
export async function acceptEvents(
  redis: RedisClient,
  keys: Keys,
  events: readonly AcceptedEvent[],
  windowMs: number,
): Promise<PipeResult[][]> {
  const r = withCommands(redis);
  return pipelineByTag(
    r,
    groupByTenant(events, (e) => e.tenantId),
    ([tenantId]) => tenantTag(tenantId),
    (pipe, [tenantId, evs]) => {
      const ks: string[] = [];
      const args: (string | number)[] = [windowMs, RECORD_TTL_S];
      for (const e of evs) {
        ks.push(keys.dedup(tenantId, e.eventId), keys.event(tenantId, e.eventId));
        args.push(e.meta);
      }
      (pipe as unknown as PipeCommands).eventsAccept(ks.length, ...ks, ...args);
    },
  );
}

/** Tells `spillway:router:intake-commit` subscribers how a group commit ended. */
function publishCommit(
  events: number,
  outcome: 'committed' | 'failed' | 'duplicate',
  started: number,
  durable: readonly Pending[],
  error?: unknown,
): void {
  if (!channels.intakeCommit.hasSubscribers) return;
  channels.intakeCommit.publish({
    events,
    outcome,
    durationMs: performance.now() - started,
    eventIds: durable.map((p) => ({ tenantId: p.event.tenantId, eventId: p.event.id })),
    ...(error === undefined ? {} : { error }),
  });
}

export function createIntake(rt: {
  redis: RedisClient;
  keys: Keys;
  logger: Logger;
  config: { dedupWindowMs: number; groupCommitMs: number };
}): DurableIntake {
  return new DurableIntake({
    redis: rt.redis,
    keys: rt.keys,
    logger: rt.logger,
    dedupWindowMs: rt.config.dedupWindowMs,
    groupCommitMs: rt.config.groupCommitMs,
  });
}

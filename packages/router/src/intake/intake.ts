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
  type SubmitResult,
  tenantTag,
  withTimeout,
} from '@spillway/shared';
import type { Queue } from 'bullmq';
import { type PipeCommands, type RouterCommands, withCommands } from '../commands/index.ts';
import { intakeBatchEvents, intakeBatchesTotal, intakeCommitSeconds, intakeEventsTotal } from '../metrics.ts';
import { ORDER_EVENT_TTL_MS, ORDER_TTL_MS } from '../ordering/store.ts';
import {
  DEDUP_PER_BUCKET,
  dedupSlots,
  type Fingerprint,
  fingerprint,
  MASK_WORDS,
} from '../records/fingerprints.ts';
import { firstError, groupByTenant, type Pipe, type PipeResult, pipelineByTag } from '../records/pipeline.ts';
import { eventToWire, type WireEvent } from '../worker/fanout.ts';

/**
 * Data of one intake job: a group-committed batch of accepted events, and `c`, each of its tenants'
 * config revision read with its dedup reserve (keys.configRev; a tenant without one is left out):
 * the worker fans out on a view at least that new (docs/architecture.md, "Config revisions").
 */
export type IntakeJobData = { v: 1; events: IntakeWireEvent[]; c?: Record<string, string> };

/**
 * An event in an intake job: `d`, the key it was deduplicated on when not its id (a GitHub or
 * Shopify body, Intake.submit `dedupKey`), for the worker's redo of a lost dedup promote.
 */
export type IntakeWireEvent = WireEvent & { d?: string };

/** Largest batch one group commit makes durable. */
const MAX_BATCH = 256;
/**
 * Group commits in flight at once before new events wait for the timer. While fewer are in flight,
 * a batch goes out at the end of the current event-loop turn (every submit of that turn joins it)
 * instead of waiting groupCommitMs; while they are, events accumulate and go out when one finishes
 * (or when the timer fires, whichever is first). Under load the batch is what arrived during one
 * commit's round trips, without a fixed wait in front of each. Two: one commit's reserve and job
 * add overlap the other's, so the process is not idle while a commit waits on Redis.
 */
const MAX_COMMITS_IN_FLIGHT = 2;
/** How long a "pending" marker lives: long enough for one commit, short enough that a crash frees the id soon. */
const PENDING_TTL_MS = 30_000;
/** How long a submit waits for another process's pending marker to settle before answering 503. */
const FOREIGN_PENDING_WAIT_MS = 1500;
/** A commit that has not finished by then answers 503 (the job may still land; the worker then marks the ids done). */
const COMMIT_TIMEOUT_MS = 3000;
const DONE = 'd';
/** How long the intake queue node's replica count (ROLE) is trusted before it is asked again. */
const REPLICA_COUNT_MS = 1000;

export interface IntakeOptions {
  redis: RedisClient;
  keys: Keys;
  logger: Logger;
  dedupWindowMs: number;
  groupCommitMs: number;
  /** Replicas that must confirm a commit (Redis WAIT) before it is answered; 0 = none (config.redisWaitReplicas). */
  waitReplicas?: number;
  waitTimeoutMs?: number;
}

interface Pending {
  event: SpillwayEvent;
  /** `<tenant>\0<dedup key>`: in-process dedup of concurrent submits. */
  key: string;
  /** The fingerprint of the dedup key (the event's id unless the caller gave another). */
  fp: Fingerprint;
  /** `opts.dedupKey` of Intake.submit, carried in the job (`d`) for the worker's promote redo. */
  dedupKey: string | undefined;
  /** The caller's decision (Intake.submit), asked once the id is reserved: added only if true. */
  gate: (() => Promise<boolean>) | undefined;
  resolve: (r: SubmitResult) => void;
  reject: (err: unknown) => void;
}

/**
 * The durable intake: collects submitted events for ≤ groupCommitMs (or MAX_BATCH events; at once
 * while fewer than MAX_COMMITS_IN_FLIGHT are in flight) and makes the batch durable as ONE BullMQ job; each caller resolves only after Redis acknowledged it.
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
  readonly #waitReplicas: number;
  readonly #waitTimeoutMs: number;
  /** Replicas the intake queue's node had connected when last asked (ROLE), at most REPLICA_COUNT_MS ago. */
  #replicaCount: { n: number; at: number } | undefined;
  readonly #inflight = new Map<string, Promise<SubmitResult>>();
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
    this.#waitReplicas = opts.waitReplicas ?? 0;
    this.#waitTimeoutMs = opts.waitTimeoutMs ?? 100;
    this.#queue = createQueue(opts.redis, opts.keys, opts.keys.intakeQueue, opts.logger);
  }

  submit(
    event: SpillwayEvent,
    opts: { gate?: () => Promise<boolean>; dedupKey?: string } = {},
  ): Promise<SubmitResult> {
    if (this.#closed) return Promise.reject(errors.unavailable('intake is shutting down', { retryAfter: 1 }));
    const dedupKey = opts.dedupKey;
    const key = `${event.tenantId}\u0000${dedupKey ?? event.id}`;
    const first = this.#inflight.get(key);
    if (first) {
      // Same id already on its way in this process: the answer is "duplicate" once the first is
      // durable, and the first's error otherwise.
      return first.then(
        (r) => {
          // The first was withdrawn by its caller's gate: nothing of it was written, so this one
          // is not a duplicate of it either (its caller answers from its own gate, or 503).
          if (r.withdrawn) return r;
          intakeEventsTotal.inc({ result: 'duplicate' });
          // Its own id: under a dedup key, the first may have come with another.
          return { id: event.id, duplicate: true };
        },
        (err) => {
          intakeEventsTotal.inc({ result: 'rejected' });
          throw err;
        },
      );
    }
    const p = new Promise<SubmitResult>((resolve, reject) => {
      this.#batch.push({
        event,
        key,
        fp: fingerprint(dedupKey ?? event.id),
        dedupKey,
        gate: opts.gate,
        resolve,
        reject,
      });
    });
    p.then(
      (r) =>
        intakeEventsTotal.inc({ result: r.withdrawn ? 'withdrawn' : r.duplicate ? 'duplicate' : 'accepted' }),
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
    let jobKey = '';
    try {
      await withTimeout(
        (async () => {
          // One Lua call per tenant (its keys share one slot), all in one pipeline on standalone
          // Redis, one pipeline per tenant on a Redis Cluster. The tenant's config revision rides
          // along: read after the reserve, so it is at least as new as any admin write answered
          // before this event arrived.
          const groups = groupByTenant(batch, (p) => p.event.tenantId);
          const { slot, back } = dedupSlots(this.#windowMs);
          const res = await pipelineByTag(
            this.#redis,
            groups,
            ([tenantId]) => tenantTag(tenantId),
            (pipe, [tenantId, ps]) => {
              (pipe as unknown as PipeCommands).dedupReserve(
                this.#keys.dedupBase(tenantId),
                marker,
                PENDING_TTL_MS,
                slot,
                back,
                ...ps.flatMap((p) => [p.fp.dedup, p.fp.bucket]),
              );
              pipe.get(this.#keys.configRev(tenantId));
            },
          );
          const foreign: Pending[] = [];
          const revs: Record<string, string> = {};
          let failed: Error | undefined;
          groups.forEach(([tenantId, ps], g) => {
            // Unread (or none yet): the job carries no revision for the tenant, and its worker reads it.
            const [revErr, rev] = res[g]![1] ?? [null, null];
            if (!revErr && typeof rev === 'string') revs[tenantId] = rev;
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
          // The callers' gates are asked now, for the reserved events only (a duplicate spends
          // nothing a gate decides, such as a source's rate); an event whose gate says no leaves
          // here, its marker released, before anything else is written for it. A gate that
          // throws is a "no".
          const gated = reserved.filter((p) => p.gate);
          if (gated.length > 0) {
            const go = await Promise.all(
              gated.map((p) =>
                Promise.resolve()
                  .then(p.gate)
                  .then(
                    (v) => v === true,
                    () => false,
                  ),
              ),
            );
            const out = new Set(gated.filter((_, i) => !go[i]));
            if (out.size > 0) {
              reserved = reserved.filter((p) => !out.has(p));
              for (const p of out) {
                void this.#redis.dedupRelease(this.#pendingKey(p), marker).catch(() => {});
                p.resolve({ id: p.event.id, duplicate: false, withdrawn: true });
              }
            }
          }
          if (reserved.length === 0) {
            intakeBatchesTotal.inc({ outcome: 'duplicate' });
            publishCommit(batch.length, 'duplicate', started, []);
            return;
          }
          const data: IntakeJobData = {
            v: 1,
            events: reserved.map((p) => {
              const w: IntakeWireEvent = eventToWire(p.event);
              if (p.dedupKey !== undefined) w.d = p.dedupKey;
              return w;
            }),
            c: revs,
          };
          jobKey = this.#queue.toKey((await this.#queue.add('batch', data, JOB_OPTS)).id!);
          if (this.#waitReplicas > 0 && !(await this.#replicated(jobKey))) {
            // The job is on the master only, or the node answering now is not the one that took
            // it (a failover): it may be lost. Answer 503 and release the markers, so the
            // provider's retry is accepted again (at worst delivered twice: the worker promotes
            // the markers when it runs this job, which also makes the retry a duplicate if it
            // comes later).
            throw errors.unavailable('the commit was not confirmed by a Redis replica in time', {
              retryAfter: 1,
            });
          }
          // Durable only from here: a commit timeout that fires while the replicas are still
          // being asked (a master killed between the add and its WAIT) answers 503, never 202.
        })(),
        COMMIT_TIMEOUT_MS,
      );
    } catch (err) {
      this.#logger.warn({ err, events: batch.length }, 'intake commit failed');
      intakeBatchesTotal.inc({ outcome: 'failed' });
      endTimer();
      publishCommit(batch.length, 'failed', started, [], err);
      const failure = errors.unavailable('durable storage cannot take the event right now', {
        cause: err,
        retryAfter: 1,
      });
      for (const p of reserved) void this.#redis.dedupRelease(this.#pendingKey(p), marker).catch(() => {});
      for (const p of batch) p.reject(failure); // no-op for the ones already settled
      return;
    }
    if (reserved.length === 0) return;
    // Durable: the answer is 202 from here on. Then the ids are made seen for the window. The
    // promote owns nothing: if it fails, the worker promotes them (promoteDedup) when it processes
    // the job. It is sent before the answer goes (ioredis sends in call order on a connection, so
    // whatever the client does after its 202 reaches Redis after it) and awaited only when an event
    // carries an orderingKey: its sequence number is given by this call, and the 202 waits for it
    // (docs/architecture.md, "Ordered delivery per key"), so an event sent after that 202 is
    // numbered after it. Two commits in flight hold events that no 202 has ordered yet: their
    // promotes may land in either order. A retry that arrives while a promote is on its way finds
    // our pending marker and waits for it to turn "d" (#awaitForeign).
    const ordered = reserved.some((p) => p.event.orderingKey !== undefined);
    const promoting = promoteDedup(
      this.#redis,
      this.#keys,
      reserved.map((p) => ({
        tenantId: p.event.tenantId,
        fp: p.fp,
        ...(p.event.orderingKey === undefined
          ? {}
          : { order: { eventId: p.event.id, key: p.event.orderingKey } }),
      })),
      this.#windowMs,
      false,
    ).then(
      (promoted) => {
        const err = firstError(promoted);
        if (err) this.#logger.warn({ err }, 'dedup promote failed; worker will promote');
        // Every id of the job is promoted: the job says so, and its worker does not redo it
        // (`commands/job-promoted-1.lua`). Unmarked (this failed, or the process died first),
        // the worker redoes it.
        else
          void this.#redis
            .jobPromoted(jobKey)
            .catch((e: unknown) => this.#logger.debug({ err: e }, 'job promoted mark failed'));
      },
      (err: unknown) => this.#logger.warn({ err }, 'dedup promote failed; worker will promote'),
    );
    if (ordered) await promoting;
    intakeBatchesTotal.inc({ outcome: 'committed' });
    endTimer();
    publishCommit(batch.length, 'committed', started, reserved);
    for (const p of reserved) p.resolve({ id: p.event.id, duplicate: false });
  }

  /**
   * Whether the commit of job `jobKey` is on enough replicas: WAIT for min(SPILLWAY_REDIS_WAIT_REPLICAS,
   * replicas connected now) on the job's node (the key routes the pipeline there on a cluster, like
   * BullMQ's add, so it runs on the connection that wrote the job). The same pipeline first asks
   * that node whether it holds the job: after a failover between the add and this call, the
   * pipeline reaches the promoted replica on a new connection, where WAIT vouches for nothing
   * (it counts that connection's own writes, of which there are none) and the job may be missing.
   * With no replica connected (a replica died, or a failover promoted one that has none yet)
   * there is nothing to wait for: the commit is answered once the node holds the job, as on a
   * standalone Redis, with one warning per such period, rather than 503s for as long as the node
   * has no replica — a 503 that a provider does not retry loses the event for good.
   */
  async #replicated(jobKey: string): Promise<boolean> {
    const now = Date.now();
    if (!this.#replicaCount || now - this.#replicaCount.at >= REPLICA_COUNT_MS) {
      const res = await this.#redis.pipeline().exists(jobKey).call('ROLE').exec();
      const [err, role] = res?.[1] ?? [new Error('pipeline aborted'), null];
      if (err) throw err;
      const r = role as [string, unknown, unknown[]?];
      const n = r[0] === 'master' && Array.isArray(r[2]) ? r[2].length : 0;
      if (n === 0 && this.#replicaCount?.n !== 0)
        this.#logger.warn(
          'the intake queue’s Redis node has no replica connected: group commits are not replicated until one is (SPILLWAY_REDIS_WAIT_REPLICAS)',
        );
      this.#replicaCount = { n, at: now };
    }
    const want = Math.min(this.#waitReplicas, this.#replicaCount.n);
    const pipe = this.#redis.pipeline().exists(jobKey);
    if (want > 0) pipe.call('WAIT', want, this.#waitTimeoutMs);
    const res = await pipe.exec();
    const [existsErr, exists] = res?.[0] ?? [new Error('pipeline aborted'), 0];
    if (existsErr) throw existsErr;
    // Not on this node: taken by another node that failed since (a worker that already finished
    // the job within this round trip is the harmless case: it promoted the ids, so a retry is a
    // duplicate).
    if (Number(exists) !== 1) {
      this.#replicaCount = undefined;
      return false;
    }
    if (want === 0) return true;
    const [err, acked] = res?.[1] ?? [new Error('pipeline aborted'), 0];
    if (err) throw err;
    if (Number(acked) >= want) return true;
    this.#replicaCount = undefined; // look again: the replica may be gone
    return false;
  }

  /** Another process holds a pending marker for this id: wait for it to become done (duplicate) or give up with 503. */
  async #awaitForeign(p: Pending): Promise<void> {
    const deadline = Date.now() + FOREIGN_PENDING_WAIT_MS;
    try {
      while (Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 50));
        const v = await this.#redis.get(this.#pendingKey(p));
        if (v === DONE) return p.resolve({ id: p.event.id, duplicate: true });
        if (v === null) break;
      }
    } catch {
      // fall through to 503
    }
    p.reject(errors.unavailable('the same event id is being accepted elsewhere; retry', { retryAfter: 1 }));
  }

  #pendingKey(p: Pending): string {
    return `${this.#keys.dedupBase(p.event.tenantId)}:p:${p.fp.dedup}`;
  }

  async close(): Promise<void> {
    this.#closed = true;
    this.#flush();
    await Promise.allSettled([...this.#inflight.values()]);
    await this.#queue.close().catch(() => {});
  }
}

/** An id to make seen: its tenant and fingerprint (and, at acceptance, its orderingKey). */
export interface SeenId {
  tenantId: string;
  fp: Fingerprint;
  order?: { eventId: string; key: string };
}

/**
 * Makes ids seen for the dedup window (`commands/dedup-promote-1.lua`): ONE Lua call per tenant,
 * one pipeline on standalone Redis. The intake promotes the ids it reserved (`check` false); the
 * worker promotes again at fan-out (`check` true: appended only if not seen yet), which covers an
 * intake whose promote was lost after its job was durable. At acceptance, events with an
 * orderingKey also get their sequence number within (tenant, key) in the same pipeline
 * (`commands/ord-accept-2n.lua`): acceptance order is the order of these calls, and the 202 goes
 * only after it. Returns pipelineByTag's per-tenant results.
 */
export async function promoteDedup(
  redis: RedisClient,
  keys: Keys,
  ids: readonly SeenId[],
  windowMs: number,
  check: boolean,
): Promise<PipeResult[][]> {
  return pipelineByTag(
    withCommands(redis),
    groupByTenant(ids, (e) => e.tenantId),
    ([tenantId]) => tenantTag(tenantId),
    (pipe, [tenantId, evs]) => queueDedupPromote(pipe, keys, tenantId, evs, windowMs, check),
  );
}

/** One tenant's part of promoteDedup, queued on a pipeline of a client that has the router's commands (`withCommands`). */
function queueDedupPromote(
  pipe: Pipe,
  keys: Keys,
  tenantId: string,
  evs: readonly SeenId[],
  windowMs: number,
  check: boolean,
): void {
  const { slot, back, ttlMs } = dedupSlots(windowMs);
  (pipe as unknown as PipeCommands).dedupPromote(
    keys.dedupBase(tenantId),
    ttlMs,
    slot,
    back,
    DEDUP_PER_BUCKET,
    check ? 1 : 0,
    MASK_WORDS,
    ...evs.flatMap((e) => [e.fp.dedup, e.fp.bucket]),
  );
  const keyed = evs.flatMap((e) =>
    e.order ? [keys.orderEvent(tenantId, e.order.eventId), keys.orderKey(tenantId, e.order.key)] : [],
  );
  if (keyed.length > 0)
    (pipe as unknown as PipeCommands).ordAccept(keyed.length, ...keyed, ORDER_TTL_MS, ORDER_EVENT_TTL_MS);
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
  config: {
    dedupWindowMs: number;
    groupCommitMs: number;
    redisWaitReplicas?: number;
    redisWaitTimeoutMs?: number;
  };
}): DurableIntake {
  return new DurableIntake({
    redis: rt.redis,
    keys: rt.keys,
    logger: rt.logger,
    dedupWindowMs: rt.config.dedupWindowMs,
    groupCommitMs: rt.config.groupCommitMs,
    waitReplicas: rt.config.redisWaitReplicas ?? 0,
    waitTimeoutMs: rt.config.redisWaitTimeoutMs ?? 100,
  });
}

import { type Keys, type Logger, type RedisClient, retryForever, tenantTag } from '@spillway/shared';
import { type PipeCommands, type RouterCommands, withCommands } from '../commands/index.ts';
import { groupByTenant, pipelineByTag } from '../records/pipeline.ts';
import type { Engine } from '../worker/engine.ts';
import { type DeliveryTask, taskFromWire, taskToWire } from '../worker/fanout.ts';
import type { Owner } from '../worker/lanes.ts';

/**
 * Ordered delivery per key (endpoints with `ordering: "per-key"`, events with an `orderingKey`).
 *
 * The order lives in Redis, per (tenant, key) and per (endpoint, key), not in Kafka: the order to
 * keep is acceptance order, which exists only at the intake (workers take jobs in parallel, and a
 * task may go through retry jobs, the spill log and a crash), and the store must let the next task
 * start only when the previous one is delivered or dead-lettered — something a partition's offsets
 * cannot say without holding every other key of the partition behind a failing head.
 *
 *   - At acceptance (commands/ord-accept-2n.lua) a keyed event gets the next sequence number of
 *     (tenant, key), once, after its job is durable: no number is ever missing.
 *   - At fan-out (commands/ord-fanout-2n.lua) its tasks for ordered endpoints are written to the
 *     store — the store owns them from then on; the job lets go — and the event is marked fanned
 *     out. An endpoint's task may start only when every earlier event of the key was fanned out
 *     (a later job may be fanned out first).
 *   - commands/ord-step-5.lua leases an (endpoint, key)'s lowest pending task to one worker at a
 *     time, which delivers it through its lane like any task and then finishes it (`done`: the next
 *     one is leased to the same worker at once), retries it in the store (`backoff`: the key waits,
 *     nothing behind it starts) or hands it back (`release`: paused, stalled, shutting down).
 *   - A lease lasts the endpoint's timeout + LEASE_MARGIN_MS and is renewed while the task is in
 *     memory; a worker that dies loses its leases when they run out, and any worker's poller then
 *     leases the task again (at-least-once: the same event again, never the next one first).
 *   - Pollers find work through a per-tenant ZSET of (endpoint, key) by when to look at them next,
 *     and a global ZSET of tenants (keys.orderedTenants) that no tenant leaves while it has any.
 *
 * A dead-lettered head is skipped: it is finished (its DLQ entry is its next owner) and the next
 * event of the key starts. A replay from the DLQ puts it back at the tail of its key (a new
 * sequence number), as does any task of an ordered endpoint that reaches a worker from elsewhere
 * (a retry job or the spill log from before the endpoint was ordered).
 */

/** A lease outlives the endpoint's timeout by this much (an attempt cannot outlast its lease). */
const LEASE_MARGIN_MS = 10_000;
/** Leases in memory are renewed this often. */
const RENEW_MS = 2000;
/** Pollers look at the global index this often. */
const POLL_MS = 200;
/** A tenant with ordered work is looked at no less often than this (even if a hint was lost). */
const IDLE_MS = 1000;
/** A task whose lane cannot take it now (paused, no credit, breaker open) is looked at again after this. */
const BLOCKED_MS = 1000;
/** How long the store's keys live after their last use (a key idle this long starts over). */
export const ORDER_TTL_MS = 7 * 24 * 3_600_000;
/**
 * How long a keyed event's sequence number is kept from its acceptance until its job is fanned
 * out (a job waiting longer gets its number at fan-out instead), and after that: a job that runs
 * again (its worker died after fan-out) must find the same number, or the event would be delivered
 * again after later ones. One small key per keyed event, so the second is short.
 */
export const ORDER_EVENT_TTL_MS = 24 * 3_600_000;
const ORDER_EVENT_FANNED_TTL_MS = 10 * 60_000;
const TENANTS_PER_POLL = 64;
const ENTRIES_PER_TENANT = 256;

type StepResult =
  | { kind: 'leased'; seq: number; wire: string; until: number }
  | { kind: 'renewed' | 'busy' | 'later'; at: number }
  | { kind: 'waiting' | 'idle' | 'stale' };

/** A keyed event at fan-out: its tasks for ordered endpoints (possibly none). */
export interface OrderedFanout {
  tenantId: string;
  eventId: string;
  key: string;
  tasks: DeliveryTask[];
  /**
   * Whether the tenant has per-key endpoints (their keys may have become deliverable, even by an
   * event none of them subscribes to: it moves the watermark). Without any, nothing is polled.
   */
  wake: boolean;
}

export interface OrderedStoreOptions {
  redis: RedisClient;
  keys: Keys;
  logger: Logger;
  engine: Engine;
  /** This worker's lease token. */
  workerId: string;
  /** The endpoint's delivery timeout (the lease covers it); default 15 s. */
  timeoutOf?: (tenantId: string, endpointId: string) => number | undefined;
}

interface Held extends Owner {
  task: DeliveryTask;
  key: string;
}

export class OrderedStore {
  readonly #o: OrderedStoreOptions;
  readonly #redis: RedisClient & RouterCommands;
  /** Leases this worker holds, by (tenant, endpoint, key). */
  readonly #held = new Map<string, Held>();
  #pollTimer: NodeJS.Timeout | undefined;
  #renewTimer: NodeJS.Timeout | undefined;
  #polling = false;
  #closed = false;

  constructor(opts: OrderedStoreOptions) {
    this.#o = opts;
    this.#redis = withCommands(opts.redis);
  }

  start(): void {
    this.#pollTimer = setInterval(() => void this.#poll(), POLL_MS);
    this.#pollTimer.unref();
    this.#renewTimer = setInterval(() => void this.#renew(), RENEW_MS);
    this.#renewTimer.unref();
  }

  /** Whether a task must go through the store: its endpoint is ordered and its event has a key. */
  static ordered(task: DeliveryTask, ordering: string | undefined): boolean {
    return ordering === 'per-key' && task.event.orderingKey !== undefined;
  }

  // --- into the store -------------------------------------------------------------------------

  /**
   * At fan-out, for every event of a job that has an orderingKey (whether or not any endpoint of it
   * is ordered: the watermark must see every event of the key). Resolves when the store owns the
   * tasks — retried until Redis takes them, as every hand-off is.
   */
  async fanout(events: readonly OrderedFanout[]): Promise<void> {
    if (events.length === 0) return;
    await this.#write(events, 'event');
  }

  /** A task of an ordered endpoint that did not come from fan-out: to the tail of its key. */
  async enqueue(task: DeliveryTask): Promise<void> {
    await this.#write(
      [
        {
          tenantId: task.tenantId,
          eventId: task.eventId,
          key: task.event.orderingKey!,
          tasks: [task],
          wake: true,
        },
      ],
      'tail',
    );
  }

  async #write(events: readonly OrderedFanout[], mode: 'event' | 'tail'): Promise<void> {
    const { keys } = this.#o;
    const now = Date.now();
    await retryForever(
      async () => {
        const res = await pipelineByTag(
          this.#redis,
          groupByTenant(events, (e) => e.tenantId),
          ([tid]) => tenantTag(tid),
          (pipe, [tid, evs]) => {
            for (const e of evs) {
              const ks = [
                keys.orderEvent(tid, e.eventId),
                keys.orderKey(tid, e.key),
                keys.orderWaiting(tid, e.key),
                keys.orderDue(tid),
              ];
              const args: (string | number)[] = [mode, now, ORDER_TTL_MS, e.key, ORDER_EVENT_FANNED_TTL_MS];
              for (const t of e.tasks) {
                ks.push(
                  keys.orderEndpoint(tid, t.endpointId, e.key),
                  keys.orderPending(tid, t.endpointId, e.key),
                );
                args.push(
                  t.endpointId,
                  JSON.stringify(taskToWire({ ...t, attempt: mode === 'tail' ? 1 : t.attempt })),
                );
              }
              (pipe as unknown as PipeCommands).ordFanout(ks.length, ...ks, ...args);
            }
          },
        );
        for (const group of res) for (const [err] of group) if (err) throw err;
      },
      (err, attempt) => {
        if (this.#closed && attempt > 2) return false;
        this.#o.logger.warn({ err, attempt }, 'ordered store write failed; retrying');
      },
    );
    // Their heads may be deliverable now: tell the pollers (the global index), and look at once.
    const tenants = new Set(events.filter((e) => e.wake).map((e) => e.tenantId));
    await Promise.all(
      [...tenants].map((tid) => this.#redis.zadd(keys.orderedTenants, 'LT', now, tid).catch(() => 0)),
    );
    for (const tid of tenants) void this.#pollTenant(tid, String(now));
  }

  // --- out of the store (the settler and the engine call these) ------------------------------

  /** The leased task was delivered or dead-lettered: the next of its key is leased to this worker. */
  async done(task: DeliveryTask): Promise<void> {
    const key = task.event.orderingKey!;
    const r = await this.#step(task.tenantId, task.endpointId, key, task.seq!, 'done');
    if (r.kind === 'leased') void this.#admit(task.tenantId, task.endpointId, key, r);
  }

  /** The leased task failed and waits `delayMs` in the store (`next` is its next attempt); nothing behind it starts. */
  async backoff(next: DeliveryTask, delayMs: number): Promise<void> {
    const wire = JSON.stringify(taskToWire(next));
    await this.#step(
      next.tenantId,
      next.endpointId,
      next.event.orderingKey!,
      next.seq!,
      'backoff',
      delayMs,
      wire,
    );
    await this.#hint(next.tenantId, Date.now() + delayMs);
  }

  /** The leased task leaves memory unfinished (paused, stalled, shutdown): another look after `delayMs`. */
  async release(task: DeliveryTask, delayMs: number): Promise<void> {
    await this.#step(task.tenantId, task.endpointId, task.event.orderingKey!, task.seq!, 'release', delayMs);
    await this.#hint(task.tenantId, Date.now() + delayMs);
  }

  /** A step on this worker's lease, retried until Redis answers (a hand-off must land). */
  async #step(
    tid: string,
    eid: string,
    key: string,
    seq: number,
    op: 'done' | 'backoff' | 'release',
    delayMs = 0,
    wire = '',
  ): Promise<StepResult> {
    let r: StepResult = { kind: 'stale' };
    await retryForever(
      async () => {
        r = await this.#call(tid, eid, key, op, [seq, delayMs, wire]);
      },
      (err, attempt) => {
        if (this.#closed && attempt > 2) return false;
        this.#o.logger.warn({ err, attempt, op }, 'ordered store step failed; retrying');
      },
    );
    if (r.kind === 'stale')
      this.#o.logger.warn(
        { tenantId: tid, endpointId: eid, seq, op },
        'ordered lease lost before the task finished (another worker took it over)',
      );
    return r;
  }

  #callArgs(
    tid: string,
    eid: string,
    key: string,
    op: string,
    extra: (string | number)[],
  ): (string | number)[] {
    return ordStepArgs(this.#o.keys, tid, eid, key, op, this.#o.workerId, this.#leaseMs(tid, eid), extra);
  }

  async #call(
    tid: string,
    eid: string,
    key: string,
    op: string,
    extra: (string | number)[],
  ): Promise<StepResult> {
    return parseStep(await this.#redis.ordStep(...this.#callArgs(tid, eid, key, op, extra)));
  }

  #leaseMs(tid: string, eid: string): number {
    return (this.#o.timeoutOf?.(tid, eid) ?? 15_000) + LEASE_MARGIN_MS;
  }

  /** An earlier time for a tenant in the global index (pollers look then). */
  async #hint(tid: string, at: number): Promise<void> {
    await this.#redis.zadd(this.#o.keys.orderedTenants, 'LT', at, tid).catch(() => 0);
  }

  /** A leased task into the engine; a lane that cannot take it now gives it back for BLOCKED_MS. */
  async #admit(tid: string, eid: string, key: string, r: { seq: number; wire: string }): Promise<void> {
    let task: DeliveryTask;
    try {
      task = { ...taskFromWire(JSON.parse(r.wire)), seq: r.seq };
    } catch (err) {
      // Never written so; if it were, the key must not stop behind it.
      this.#o.logger.error(
        { err, tenantId: tid, endpointId: eid, seq: r.seq },
        'unreadable ordered task dropped',
      );
      const next = await this.#step(tid, eid, key, r.seq, 'done');
      if (next.kind === 'leased') void this.#admit(tid, eid, key, next);
      return;
    }
    const id = `${tid}\n${eid}\n${key}`;
    const held: Held = {
      task,
      key: id,
      settle: () => {
        if (this.#held.get(id) === held) this.#held.delete(id);
      },
    };
    const engine = this.#o.engine;
    try {
      await engine.view(tid);
    } catch {
      await this.release(task, BLOCKED_MS);
      return;
    }
    this.#held.set(id, held);
    if (this.#closed || engine.tryAdmit(task, held, 'ordered') === 'blocked') {
      this.#held.delete(id);
      await this.release(task, BLOCKED_MS);
    }
  }

  // --- pollers --------------------------------------------------------------------------------

  async #poll(): Promise<void> {
    if (this.#polling || this.#closed) return;
    this.#polling = true;
    try {
      const now = Date.now();
      const flat = await this.#redis.zrangebyscore(
        this.#o.keys.orderedTenants,
        '-inf',
        now,
        'WITHSCORES',
        'LIMIT',
        0,
        TENANTS_PER_POLL,
      );
      const jobs: Promise<void>[] = [];
      for (let i = 0; i + 1 < flat.length; i += 2) jobs.push(this.#pollTenant(flat[i]!, flat[i + 1]!));
      await Promise.all(jobs);
    } catch (err) {
      this.#o.logger.debug({ err }, 'ordered poll failed');
    } finally {
      this.#polling = false;
    }
  }

  /** Leases what is due of one tenant's ordered keys, then sets when the tenant is looked at next. */
  async #pollTenant(tid: string, observed: string): Promise<void> {
    const { keys, engine } = this.#o;
    try {
      const now = Date.now();
      const members = await this.#redis.zrangebyscore(
        keys.orderDue(tid),
        '-inf',
        now,
        'LIMIT',
        0,
        ENTRIES_PER_TENANT,
      );
      const v = members.length > 0 ? await engine.view(tid) : engine.viewNow(tid);
      const later: string[] = [];
      const steps: Promise<void>[] = [];
      for (const m of members) {
        const [eid, key] = m.split('\n') as [string, string];
        const ep = v?.endpoints.get(eid);
        // Paused: looked at again later, without a lease going back and forth every poll.
        if (v?.tenant && (v.tenant.status === 'paused' || ep?.status === 'paused')) {
          later.push(m);
          continue;
        }
        steps.push(
          this.#call(tid, eid, key, 'lease', []).then((r) =>
            r.kind === 'leased' ? this.#admit(tid, eid, key, r) : undefined,
          ),
        );
      }
      if (later.length > 0)
        await this.#redis.zadd(keys.orderDue(tid), 'XX', ...later.flatMap((m) => [now + BLOCKED_MS, m]));
      await Promise.all(steps);
      const first = await this.#redis.zrange(keys.orderDue(tid), 0, 0, 'WITHSCORES');
      const ordered = v ? [...v.endpoints.values()].some((e) => e.ordering === 'per-key') : true;
      // Looked at again when its first (endpoint, key) is due, and at least every IDLE_MS while it
      // has any (a lost hint costs no more than that); forgotten when it has nothing and no
      // ordered endpoint (or is gone).
      const next =
        first.length === 0 && (!ordered || !v?.tenant)
          ? ''
          : String(
              Math.min(first.length ? Number(first[1]) : Number.POSITIVE_INFINITY, Date.now() + IDLE_MS),
            );
      await this.#redis.ordTenant(keys.orderedTenants, tid, observed, next);
    } catch (err) {
      this.#o.logger.debug({ err, tenantId: tid }, 'ordered tenant poll failed');
    }
  }

  /** Keeps the leases of the tasks in this worker's memory. */
  async #renew(): Promise<void> {
    if (this.#held.size === 0) return;
    const held = [...this.#held.values()];
    await Promise.all(
      held.map(async (h) => {
        const t = h.task;
        const r = await this.#call(t.tenantId, t.endpointId, t.event.orderingKey!, 'renew', [t.seq!]).catch(
          () => undefined,
        );
        if (r?.kind === 'stale') {
          this.#o.logger.warn(
            { tenantId: t.tenantId, endpointId: t.endpointId, eventId: t.eventId },
            'ordered lease expired while the task was in memory (this worker was too slow to renew it)',
          );
          if (this.#held.get(h.key) === h) this.#held.delete(h.key);
        }
      }),
    );
  }

  /** Stops leasing; leases still held are handed back by the engine's shutdown (release). */
  close(): void {
    this.#closed = true;
    if (this.#pollTimer) clearInterval(this.#pollTimer);
    if (this.#renewTimer) clearInterval(this.#renewTimer);
  }
}

/** KEYS and ARGV of `commands/ord-step-5.lua` for one (tenant, endpoint, key). */
export function ordStepArgs(
  keys: Keys,
  tid: string,
  eid: string,
  key: string,
  op: string,
  token: string,
  leaseMs: number,
  extra: (string | number)[],
  now = Date.now(),
): (string | number)[] {
  return [
    keys.orderEndpoint(tid, eid, key),
    keys.orderPending(tid, eid, key),
    keys.orderKey(tid, key),
    keys.orderWaiting(tid, key),
    keys.orderDue(tid),
    op,
    now,
    ORDER_TTL_MS,
    `${eid}\n${key}`,
    eid,
    token,
    leaseMs,
    ...extra,
  ];
}

function parseStep(raw: (string | number)[]): StepResult {
  const kind = String(raw[0]);
  if (kind === 'leased') return { kind, seq: Number(raw[1]), wire: String(raw[2]), until: Number(raw[3]) };
  if (kind === 'renewed' || kind === 'busy' || kind === 'later') return { kind, at: Number(raw[1]) };
  if (kind === 'waiting' || kind === 'idle' || kind === 'stale') return { kind };
  throw new Error(`ord-step answered ${kind}`);
}

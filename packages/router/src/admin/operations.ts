import { createHash, randomBytes } from 'node:crypto';
import {
  type Endpoint,
  errors,
  KEYED_JOB_OPTS,
  type Keys,
  type Logger,
  type RedisClient,
} from '@spillway/shared';
import type { Queue } from 'bullmq';
import { withCommands } from '../commands/index.ts';
import type { ConfigStore } from '../config/store.ts';
import type { HistoryReader } from '../history/reader.ts';
import type { EventRecord } from '../history/wire.ts';
import { OPERATION_TTL_MS } from '../history/writer.ts';
import { readDlq } from '../records/records.ts';
import type { RetryJobData } from '../retry/scheduler.ts';
import { staleTask, type WireTask } from '../worker/fanout.ts';

/** A resend or recover: what it covers and how far it got. */
export interface Operation {
  id: string;
  kind: 'resend' | 'recover';
  tenantId: string;
  eventId?: string;
  endpointId?: string;
  /** recover: failures at or after this time (ISO-8601). */
  since?: string;
  /** running: still handing deliveries to the queue; enqueued: all handed over; failed: it stopped. */
  state: 'running' | 'enqueued' | 'failed';
  /** Deliveries it covers. */
  total: number;
  /** Deliveries handed to the retry queue (the normal credit/spill path) so far. */
  enqueued: number;
  /** Of those, how many ended delivered, and how many ended failed (dead-lettered again). */
  delivered: number;
  failed: number;
  createdAt: string;
  error?: string;
}

/** Tasks per retry job (as DLQ replay). */
const CHUNK = 200;

/**
 * Resend and recover (docs/operations.md, "History"). Both go through the normal path: their tasks
 * are added as retry jobs due now (attempt 1, a fresh schedule), which a worker claims like any
 * retry — credits, lanes, spill and breakers apply. Each operation is idempotent per request id:
 * the first request stores it (SET NX, kept a day) and later ones with that id get it back with its
 * progress; job ids derive from it, so a chunk added twice is one job.
 */
export class Operations {
  readonly #redis: ReturnType<typeof withCommands>;
  readonly #keys: Keys;
  readonly #logger: Logger;
  readonly #store: ConfigStore;
  readonly #history: HistoryReader;
  readonly #queue: () => Queue;

  constructor(o: {
    redis: RedisClient;
    keys: Keys;
    logger: Logger;
    store: ConfigStore;
    history: HistoryReader;
    queue: () => Queue;
  }) {
    this.#redis = withCommands(o.redis);
    this.#keys = o.keys;
    this.#logger = o.logger;
    this.#store = o.store;
    this.#history = o.history;
    this.#queue = o.queue;
  }

  #key(tenantId: string, id: string): string {
    return `${this.#keys.operations(tenantId)}:${id}`;
  }

  async get(tenantId: string, id: string): Promise<Operation | undefined> {
    const [raw, n] = await Promise.all([
      this.#redis.get(this.#key(tenantId, id)),
      this.#redis.hgetall(`${this.#key(tenantId, id)}:n`),
    ]);
    if (!raw) return undefined;
    const op = JSON.parse(raw) as Operation;
    return { ...op, delivered: Number(n.delivered ?? 0), failed: Number(n.failed ?? 0) };
  }

  async #save(op: Operation): Promise<void> {
    await this.#redis.set(this.#key(op.tenantId, op.id), JSON.stringify(op), 'PX', OPERATION_TTL_MS);
  }

  /** Claims the request id; the existing operation when it was used before. */
  async #claim(op: Operation): Promise<{ op: Operation; created: boolean }> {
    const ok = await this.#redis.set(
      this.#key(op.tenantId, op.id),
      JSON.stringify(op),
      'PX',
      OPERATION_TTL_MS,
      'NX',
    );
    if (ok === 'OK') return { op, created: true };
    const prev = await this.get(op.tenantId, op.id);
    if (!prev) return this.#claim(op);
    if (prev.kind !== op.kind || prev.eventId !== op.eventId || prev.endpointId !== op.endpointId)
      throw errors.conflict(`request id ${op.id} was used for another ${prev.kind}`);
    return { op: prev, created: false };
  }

  /** Adds one retry job due now with these tasks; its id derives from the operation and chunk. */
  async #enqueue(op: Operation, chunk: number, tasks: WireTask[]): Promise<void> {
    const data: RetryJobData = { v: 1, tasks };
    const jobId = `op-${createHash('sha1').update(`${op.tenantId}\u0000${op.id}\u0000${chunk}`).digest('hex')}`;
    await this.#queue().add('resend', data, { ...KEYED_JOB_OPTS, jobId });
    // The job owns the tasks now; the worker counts `retrying` down when it finishes the job.
    await this.#redis
      .hincrby(this.#keys.tenantCounters(op.tenantId), 'retrying', tasks.length)
      .catch(() => {});
  }

  /** Resends one event to one endpoint or to every endpoint it was fanned out to (that still exists). */
  async resend(
    tenantId: string,
    eventId: string,
    o: { endpointId?: string; requestId?: string },
  ): Promise<{ op: Operation; created: boolean }> {
    const ev = await this.#history.findEvent(tenantId, eventId);
    if (!ev) throw errors.notFound(`event ${eventId} not found in the event log`);
    const existing = new Map((await this.#store.listEndpoints(tenantId)).map((e) => [e.id, e]));
    let targets: string[];
    if (o.endpointId) {
      if (!existing.has(o.endpointId)) throw errors.notFound(`endpoint ${o.endpointId} not found`);
      targets = [o.endpointId];
    } else targets = ev.p.filter((p) => existing.has(p));
    const op: Operation = {
      id: o.requestId ?? `op_${randomBytes(9).toString('base64url')}`,
      kind: 'resend',
      tenantId,
      eventId,
      ...(o.endpointId ? { endpointId: o.endpointId } : {}),
      state: 'running',
      total: targets.length,
      enqueued: 0,
      delivered: 0,
      failed: 0,
      createdAt: new Date().toISOString(),
    };
    const claimed = await this.#claim(op);
    if (!claimed.created) return claimed;
    if (targets.length > 0)
      await this.#enqueue(
        op,
        0,
        targets.map((p) => task(ev, existing.get(p)!, op.id)),
      );
    op.enqueued = targets.length;
    op.state = 'enqueued';
    await this.#save(op);
    return { op: (await this.get(tenantId, op.id)) ?? op, created: true };
  }

  /**
   * Resends every delivery to the endpoint that failed for good at or after `since`: its DLQ entries
   * (they leave the DLQ, as on replay) and the failures the history knows whose DLQ entry is gone
   * (purged, archived). Answers at once; the work runs on and its progress is the operation's.
   */
  async recover(
    tenantId: string,
    endpointId: string,
    o: { since: number; requestId?: string },
  ): Promise<{ op: Operation; created: boolean; done: Promise<void> }> {
    const endpoint = await this.#store.requireEndpoint(tenantId, endpointId);
    const op: Operation = {
      id: o.requestId ?? `op_${randomBytes(9).toString('base64url')}`,
      kind: 'recover',
      tenantId,
      endpointId,
      since: new Date(o.since).toISOString(),
      state: 'running',
      total: 0,
      enqueued: 0,
      delivered: 0,
      failed: 0,
      createdAt: new Date().toISOString(),
    };
    const claimed = await this.#claim(op);
    if (!claimed.created) return { ...claimed, done: Promise.resolve() };
    // What it covers, counted before anything moves (the progress bar's total).
    const inDlq = (
      await readDlq(this.#redis, this.#keys, tenantId, { endpointId, limit: 10_000_000 })
    ).filter(
      // Not an earlier incarnation's dead letters (the endpoint deleted and created again): a
      // worker would only discard them.
      (x) => Date.parse(x.item.failedAt) >= o.since && !staleTask({ gen: x.item.task.g }, endpoint),
    );
    const fromDlq = new Set(inDlq.map((x) => x.item.eventId));
    const fromLog = (await this.#history.failedSince(tenantId, endpointId, o.since)).filter(
      (id) => !fromDlq.has(id),
    );
    op.total = inDlq.length + fromLog.length;
    await this.#save(op);
    const done = this.#runRecover(op, endpoint, inDlq, fromLog).catch(async (err: unknown) => {
      this.#logger.warn({ err, tenantId, endpointId, operation: op.id }, 'recover stopped');
      op.state = 'failed';
      op.error = (err as Error).message;
      await this.#save(op).catch(() => {});
    });
    return { op, created: true, done };
  }

  async #runRecover(
    op: Operation,
    endpoint: Endpoint,
    inDlq: Awaited<ReturnType<typeof readDlq>>,
    fromLog: string[],
  ): Promise<void> {
    let chunk = 0;
    for (let i = 0; i < inDlq.length; i += CHUNK) {
      const part = inDlq.slice(i, i + CHUNK);
      await this.#enqueue(
        op,
        chunk++,
        part.map(({ item }) => ({ ...item.task, a: 1, rs: op.id })),
      );
      await this.#redis.dlqRemove(this.#keys.dlq(op.tenantId), ...part.map((x) => x.raw));
      op.enqueued += part.length;
      await this.#save(op);
    }
    for (let i = 0; i < fromLog.length; i += CHUNK) {
      const tasks: WireTask[] = [];
      for (const id of fromLog.slice(i, i + CHUNK)) {
        const ev = await this.#history.findEvent(op.tenantId, id);
        if (ev) tasks.push(task(ev, endpoint, op.id));
        else op.total--; // past the retention: nothing left to send
      }
      if (tasks.length) await this.#enqueue(op, chunk++, tasks);
      op.enqueued += tasks.length;
      await this.#save(op);
    }
    op.state = 'enqueued';
    await this.#save(op);
  }
}

/**
 * A fresh delivery (attempt 1) of a logged event to one endpoint, marked with its operation and
 * made for the endpoint's current incarnation.
 */
function task(ev: EventRecord, endpoint: Endpoint, op: string): WireTask {
  const { p: _p, at: _at, ...e } = ev;
  const w: WireTask = { e, p: endpoint.id, a: 1, rs: op };
  if (endpoint.gen !== undefined) w.g = endpoint.gen;
  return w;
}

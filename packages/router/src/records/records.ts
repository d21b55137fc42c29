import {
  type DeliveryRecord,
  type DlqEntry,
  type Keys,
  ListWriter,
  type Logger,
  type RedisClient,
} from '@spillway/shared';
import type { EventView } from '../admin/services.ts';
import { type DeliveryTask, taskToWire, type WireTask } from '../worker/fanout.ts';
import { firstError, hashTag, pipelineByTag } from './pipeline.ts';

/**
 * Delivery records: one hash per event, `keys.event(tenantId, eventId)`:
 *   meta          {"id","type","receivedAt"}
 *   ep:<endpoint> DeliveryRecord JSON (pending at fan-out, `commands/events-fanout-2n.lua`;
 *                 rewritten after every attempt)
 * They are what GET /v1/tenants/:tid/events/:eid shows. They are NOT the durable owner of anything
 * (tasks are owned by jobs/offsets), so writes are batched and best-effort.
 */
export const RECORD_TTL_S = 7 * 24 * 3600;

/** The `meta` field of an event's record (written by the intake at accept, and again by the worker if missing). */
export function recordMeta(eventId: string, type: string, receivedAt: number): string {
  return JSON.stringify({ id: eventId, type, receivedAt });
}
const FLUSH_MS = 5;

/** One attempt's record (the pending ones are written at fan-out: intake's fanoutRecords). */
type Write = { key: string; field: string; value: string };

export class RecordWriter {
  readonly #redis: RedisClient;
  readonly #keys: Keys;
  readonly #logger: Logger;
  readonly #writer = new ListWriter<Write>({ flushMs: FLUSH_MS, write: (buf) => this.#write(buf) });

  constructor(redis: RedisClient, keys: Keys, logger: Logger) {
    this.#redis = redis;
    this.#keys = keys;
    this.#logger = logger;
  }

  attempt(task: DeliveryTask, rec: DeliveryRecord): void {
    this.#push({
      key: this.#keys.event(task.tenantId, task.eventId),
      field: `ep:${task.endpointId}`,
      value: JSON.stringify(rec),
    });
  }

  #push(w: Write): void {
    this.#writer.add(w);
  }

  /** Writes what is buffered; resolves once every write started so far has ended. */
  flush(): Promise<void> {
    return this.#writer.flush();
  }

  /** Per tenant (slot) on a Redis Cluster; one pipeline on standalone Redis. */
  async #write(buf: Write[]): Promise<void> {
    // Only the last record of one delivery in a flush matters (HSET overwrites).
    const last = new Map<string, Write>();
    for (const w of buf) last.set(`${w.key}\u0000${w.field}`, w);
    const res = await pipelineByTag(
      this.#redis,
      [...last.values()],
      (w) => hashTag(w.key),
      (pipe, w) => pipe.hset(w.key, w.field, w.value),
    );
    const err = firstError(res);
    if (err) this.#logger.warn({ err, writes: buf.length }, 'delivery record write failed');
  }
}

export async function readEvent(
  redis: RedisClient,
  keys: Keys,
  tenantId: string,
  eventId: string,
): Promise<EventView | undefined> {
  const all = await redis.hgetall(keys.event(tenantId, eventId));
  if (!all.meta) return undefined;
  const meta = JSON.parse(all.meta) as { id: string; type: string; receivedAt: number };
  const deliveries = Object.entries(all)
    .filter(([k]) => k.startsWith('ep:'))
    .map(([, v]) => JSON.parse(v) as DeliveryRecord)
    .sort((a, b) => a.endpointId.localeCompare(b.endpointId));
  return { id: meta.id, type: meta.type, receivedAt: new Date(meta.receivedAt).toISOString(), deliveries };
}

/** One DLQ list element: what the API shows plus the task, so replay needs nothing else. */
export interface DlqItem extends DlqEntry {
  task: WireTask;
}

/** Durable hand-off of a task to the DLQ (the caller keeps the task until this resolves). */
export async function pushDlq(
  redis: RedisClient,
  keys: Keys,
  task: DeliveryTask,
  entry: DlqEntry,
): Promise<void> {
  const item: DlqItem = { ...entry, task: { ...taskToWire(task), a: 1 } };
  await redis.rpush(keys.dlq(task.tenantId), JSON.stringify(item));
}

export async function readDlq(
  redis: RedisClient,
  keys: Keys,
  tenantId: string,
  opts: { endpointId?: string; limit?: number } = {},
): Promise<{ raw: string; item: DlqItem }[]> {
  const limit = opts.limit ?? 1000;
  const out: { raw: string; item: DlqItem }[] = [];
  // Pages through the list so an endpoint filter still returns up to `limit` matches.
  for (let start = 0; out.length < limit; start += 500) {
    const page = await redis.lrange(keys.dlq(tenantId), start, start + 499);
    for (const raw of page) {
      const item = JSON.parse(raw) as DlqItem;
      if (opts.endpointId === undefined || item.endpointId === opts.endpointId) out.push({ raw, item });
      if (out.length >= limit) break;
    }
    if (page.length < 500) break;
  }
  return out;
}

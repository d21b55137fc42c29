import type { DlqEntry, Keys, RedisClient } from '@spillway/shared';
import { withCommands } from '../commands/index.ts';
import { type DeliveryTask, taskToWire, type WireTask } from '../worker/fanout.ts';

/**
 * The DLQ: one Redis list per tenant, `keys.dlq(tenantId)`, of DlqItem JSON (what the API shows
 * plus the task, body included, so a replay needs nothing else). Event records and attempts are
 * the history's (../history/, docs/storage.md).
 */

/** One DLQ list element: what the API shows plus the task, so replay needs nothing else. */
export interface DlqItem extends DlqEntry {
  task: WireTask;
}

/**
 * Durable hand-off of a task to the DLQ (the caller keeps the task until this resolves). Resolves
 * with the list's length, or -1 when the list is at `cap` and nothing was written: the caller has
 * the oldest entries archived (dlq-archive.ts) and tries again, so the list never holds more than
 * the cap, not even for a moment (docs/storage.md). Without `cap`, no bound (tests, tools).
 */
export async function pushDlq(
  redis: RedisClient,
  keys: Keys,
  task: DeliveryTask,
  entry: DlqEntry,
  cap?: number,
): Promise<number> {
  const item: DlqItem = { ...entry, task: { ...taskToWire(task), a: 1 } };
  const raw = JSON.stringify(item);
  if (cap === undefined) return redis.rpush(keys.dlq(task.tenantId), raw);
  return Number(await withCommands(redis).dlqPush(keys.dlq(task.tenantId), cap, raw));
}

/**
 * A page of the DLQ, oldest first: entries from list index `from`, at most `limit` (matching the
 * endpoint, if given), and the index to go on from when there are more.
 */
export async function pageDlq(
  redis: RedisClient,
  keys: Keys,
  tenantId: string,
  opts: { endpointId?: string; from: number; limit: number },
): Promise<{ items: DlqItem[]; next?: number }> {
  const items: DlqItem[] = [];
  for (let start = opts.from; ; start += 500) {
    const page = await redis.lrange(keys.dlq(tenantId), start, start + 499);
    for (let k = 0; k < page.length; k++) {
      const item = JSON.parse(page[k]!) as DlqItem;
      if (opts.endpointId !== undefined && item.endpointId !== opts.endpointId) continue;
      items.push(item);
      if (items.length >= opts.limit) return { items, next: start + k + 1 };
    }
    if (page.length < 500) return { items };
  }
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

import type { RedisClient } from '@spillway/shared';
import { Cluster } from 'ioredis';

export type Pipe = ReturnType<RedisClient['pipeline']>;
export type PipeResult = [Error | null, unknown];

/**
 * Runs a batch of commands as pipelines that Redis Cluster accepts. ioredis sends a cluster
 * pipeline to ONE node and rejects it when its keys map to slots of different nodes, so on a
 * cluster the items are grouped by `tagOf` (a tenant's keys share the hash tag `{t:<tenant>}`, hence
 * one slot) and each group is its own pipeline, all sent in parallel. Standalone Redis gets one
 * pipeline (one round trip), as before.
 *
 * Returns, per item and in item order, the results of the commands `add` queued for it. A group
 * whose pipeline failed as a whole reports that error for each of its commands.
 */
export async function pipelineByTag<T>(
  redis: RedisClient,
  items: readonly T[],
  tagOf: (item: T) => string,
  add: (pipe: Pipe, item: T) => void,
): Promise<PipeResult[][]> {
  const groups = new Map<string, number[]>();
  if (redis instanceof Cluster) {
    items.forEach((it, i) => {
      const tag = tagOf(it);
      const g = groups.get(tag);
      if (g) g.push(i);
      else groups.set(tag, [i]);
    });
  } else if (items.length > 0)
    groups.set(
      '',
      items.map((_, i) => i),
    );
  const out: PipeResult[][] = items.map(() => []);
  await Promise.all(
    [...groups.values()].map(async (idxs) => {
      const pipe = redis.pipeline();
      const spans: [number, number][] = [];
      for (const i of idxs) {
        const from = pipe.length;
        add(pipe, items[i]!);
        spans.push([from, pipe.length]);
      }
      let res: PipeResult[];
      try {
        res = ((await pipe.exec()) ?? []) as PipeResult[];
      } catch (err) {
        res = Array.from({ length: pipe.length }, () => [err as Error, null] as PipeResult);
      }
      idxs.forEach((i, k) => {
        const [from, to] = spans[k]!;
        out[i] = res.slice(from, to);
      });
    }),
  );
  return out;
}

/**
 * Items grouped by tenant, in first-seen order: the unit of one Lua call (all keys of one tenant
 * share its hash tag, hence one slot on Redis Cluster).
 */
export function groupByTenant<T>(items: readonly T[], tenantOf: (item: T) => string): [string, T[]][] {
  const groups = new Map<string, T[]>();
  for (const it of items) {
    const tenantId = tenantOf(it);
    const g = groups.get(tenantId);
    if (g) g.push(it);
    else groups.set(tenantId, [it]);
  }
  return [...groups.entries()];
}

/** The first error in a pipelineByTag result, if any. */
export function firstError(res: PipeResult[][]): Error | undefined {
  for (const r of res) for (const [err] of r) if (err) return err;
  return undefined;
}

/** The hash tag of a key (`{...}`, what Redis Cluster hashes), or the key itself without one. */
export function hashTag(key: string): string {
  return /\{[^}]+\}/.exec(key)?.[0] ?? key;
}

import type { Source, SourceDirectory } from '@spillway/shared';

export interface SourceCacheOptions {
  /** Reads one source from the config store (Redis). */
  load(sourceId: string): Promise<Source | undefined>;
  /** How long an answer (found or not) is reused. Default 500 ms (a missed change costs at most that). */
  ttlMs?: number;
  /** Entries kept at most; the least recently used go first. Default 10 000. */
  maxEntries?: number;
}

export interface SourceCache extends SourceDirectory {
  /** Drops one id (call it on every published source change). */
  invalidate(sourceId: string): void;
  /** Drops everything (a tenant deleted with its sources publishes one change for the tenant). */
  clear(): void;
  readonly size: number;
}

interface Entry {
  value: Source | undefined;
  at: number;
}

/**
 * The ingest role's source lookup. Bounded because ingest is the one place where the ids looked up
 * come from strangers: a flood of random `/ingest/<id>` paths must not grow memory (every miss is
 * remembered for `ttlMs`, but only the `maxEntries` most recent). Concurrent lookups of one id share
 * one load, so a burst for a cold source costs one Redis call.
 */
export function createSourceCache(opts: SourceCacheOptions): SourceCache {
  const ttl = opts.ttlMs ?? 500;
  const max = Math.max(1, opts.maxEntries ?? 10_000);
  const entries = new Map<string, Entry>();
  // A load that was in flight when its id changed is marked stale: it still answers its callers
  // but must not store an answer read before the change.
  const loading = new Map<string, { promise: Promise<Source | undefined>; stale: boolean }>();

  function store(id: string, value: Source | undefined): void {
    entries.delete(id);
    entries.set(id, { value, at: Date.now() });
    while (entries.size > max) entries.delete(entries.keys().next().value as string);
  }

  return {
    get(id) {
      const e = entries.get(id);
      if (e && Date.now() - e.at < ttl) {
        // Map order is the LRU order: re-insert on use.
        entries.delete(id);
        entries.set(id, e);
        return Promise.resolve(e.value);
      }
      const inflight = loading.get(id);
      if (inflight) return inflight.promise;
      const rec = { promise: undefined as unknown as Promise<Source | undefined>, stale: false };
      rec.promise = opts.load(id).then(
        (value) => {
          if (loading.get(id) === rec) loading.delete(id);
          if (!rec.stale) store(id, value);
          return value;
        },
        (err: unknown) => {
          if (loading.get(id) === rec) loading.delete(id);
          throw err;
        },
      );
      loading.set(id, rec);
      return rec.promise;
    },
    invalidate(id) {
      entries.delete(id);
      const rec = loading.get(id);
      if (rec) {
        rec.stale = true;
        loading.delete(id);
      }
    },
    clear() {
      entries.clear();
      for (const rec of loading.values()) rec.stale = true;
      loading.clear();
    },
    get size() {
      return entries.size;
    },
  };
}

import {
  type Endpoint,
  errors,
  type Keys,
  type Logger,
  type RedisClient,
  type Source,
  type SourceDirectory,
  type Tenant,
} from '@spillway/shared';

/**
 * Tenants, endpoints and sources, stored in Redis:
 *   keys.tenants              SET of tenant ids
 *   keys.tenant(tenantId)          STRING Tenant JSON
 *   keys.endpoints(tenantId)       HASH endpointId → Endpoint JSON
 *   keys.sources              HASH sourceId → Source JSON (ingest knows only the source id)
 * Every write publishes a Change on keys.changes so that caches in other processes drop it.
 */
export interface Change {
  kind: 'tenant' | 'endpoint' | 'source';
  tenantId: string;
  id: string;
}

export class ConfigStore {
  readonly #redis: RedisClient;
  readonly #keys: Keys;

  constructor(redis: RedisClient, keys: Keys) {
    this.#redis = redis;
    this.#keys = keys;
  }

  async #publish(change: Change): Promise<void> {
    await this.#redis.publish(this.#keys.changes, JSON.stringify(change));
  }

  // --- tenants -------------------------------------------------------------------------------

  /** Creates the tenant; SPW_ERR_CONFLICT when the id exists. */
  async createTenant(tenant: Tenant): Promise<Tenant> {
    const ok = await this.#redis.set(this.#keys.tenant(tenant.id), JSON.stringify(tenant), 'NX');
    if (ok !== 'OK') throw errors.conflict(`tenant ${tenant.id} already exists`);
    await this.#redis.sadd(this.#keys.tenants, tenant.id);
    await this.#publish({ kind: 'tenant', tenantId: tenant.id, id: tenant.id });
    return tenant;
  }

  async getTenant(tenantId: string): Promise<Tenant | undefined> {
    const raw = await this.#redis.get(this.#keys.tenant(tenantId));
    return raw ? (JSON.parse(raw) as Tenant) : undefined;
  }

  async requireTenant(tenantId: string): Promise<Tenant> {
    const t = await this.getTenant(tenantId);
    if (!t) throw errors.notFound(`tenant ${tenantId} not found`);
    return t;
  }

  async listTenants(): Promise<Tenant[]> {
    const ids = (await this.#redis.smembers(this.#keys.tenants)).sort();
    const out: Tenant[] = [];
    for (const id of ids) {
      const t = await this.getTenant(id);
      if (t) out.push(t);
    }
    return out;
  }

  /** Read-modify-write of one tenant (admin is the only writer; last write wins). */
  async updateTenant(tenantId: string, update: (t: Tenant) => Tenant): Promise<Tenant> {
    const next = update(await this.requireTenant(tenantId));
    await this.#redis.set(this.#keys.tenant(tenantId), JSON.stringify(next), 'XX');
    await this.#publish({ kind: 'tenant', tenantId, id: tenantId });
    return next;
  }

  async deleteTenant(tenantId: string): Promise<void> {
    await this.requireTenant(tenantId);
    for (const s of await this.listSources(tenantId)) await this.#redis.hdel(this.#keys.sources, s.id);
    // The tenant's own keys share one hash tag (one slot), so one DEL takes them all. Event records
    // and dedup markers expire on their own; tasks still spilled or in retry jobs are dropped when a
    // worker finds their tenant gone.
    await this.#redis.del(
      this.#keys.tenant(tenantId),
      this.#keys.endpoints(tenantId),
      this.#keys.dlq(tenantId),
      this.#keys.tenantCounters(tenantId),
    );
    await this.#redis.srem(this.#keys.tenants, tenantId);
    await this.#publish({ kind: 'tenant', tenantId, id: tenantId });
  }

  // --- endpoints -----------------------------------------------------------------------------

  async createEndpoint(ep: Endpoint): Promise<Endpoint> {
    await this.requireTenant(ep.tenantId);
    const ok = await this.#redis.hsetnx(this.#keys.endpoints(ep.tenantId), ep.id, JSON.stringify(ep));
    if (ok !== 1) throw errors.conflict(`endpoint ${ep.id} already exists`);
    await this.#publish({ kind: 'endpoint', tenantId: ep.tenantId, id: ep.id });
    return ep;
  }

  async getEndpoint(tenantId: string, endpointId: string): Promise<Endpoint | undefined> {
    const raw = await this.#redis.hget(this.#keys.endpoints(tenantId), endpointId);
    return raw ? (JSON.parse(raw) as Endpoint) : undefined;
  }

  async requireEndpoint(tenantId: string, endpointId: string): Promise<Endpoint> {
    const ep = await this.getEndpoint(tenantId, endpointId);
    if (!ep) throw errors.notFound(`endpoint ${endpointId} not found`);
    return ep;
  }

  async listEndpoints(tenantId: string): Promise<Endpoint[]> {
    const all = await this.#redis.hgetall(this.#keys.endpoints(tenantId));
    return Object.values(all)
      .map((raw) => JSON.parse(raw) as Endpoint)
      .sort((a, b) => a.createdAt.localeCompare(b.createdAt) || a.id.localeCompare(b.id));
  }

  async updateEndpoint(
    tenantId: string,
    endpointId: string,
    update: (ep: Endpoint) => Endpoint,
  ): Promise<Endpoint> {
    const next = update(await this.requireEndpoint(tenantId, endpointId));
    await this.#redis.hset(this.#keys.endpoints(tenantId), endpointId, JSON.stringify(next));
    await this.#publish({ kind: 'endpoint', tenantId, id: endpointId });
    return next;
  }

  async deleteEndpoint(tenantId: string, endpointId: string): Promise<void> {
    const n = await this.#redis.hdel(this.#keys.endpoints(tenantId), endpointId);
    if (n !== 1) throw errors.notFound(`endpoint ${endpointId} not found`);
    await this.#publish({ kind: 'endpoint', tenantId, id: endpointId });
  }

  // --- sources -------------------------------------------------------------------------------

  async createSource(src: Source): Promise<Source> {
    await this.requireTenant(src.tenantId);
    const ok = await this.#redis.hsetnx(this.#keys.sources, src.id, JSON.stringify(src));
    if (ok !== 1) throw errors.conflict(`source ${src.id} already exists`);
    await this.#publish({ kind: 'source', tenantId: src.tenantId, id: src.id });
    return src;
  }

  async getSource(sourceId: string): Promise<Source | undefined> {
    const raw = await this.#redis.hget(this.#keys.sources, sourceId);
    return raw ? (JSON.parse(raw) as Source) : undefined;
  }

  async listSources(tenantId: string): Promise<Source[]> {
    const all = await this.#redis.hgetall(this.#keys.sources);
    return Object.values(all)
      .map((raw) => JSON.parse(raw) as Source)
      .filter((s) => s.tenantId === tenantId)
      .sort((a, b) => a.createdAt.localeCompare(b.createdAt) || a.id.localeCompare(b.id));
  }

  async deleteSource(tenantId: string, sourceId: string): Promise<void> {
    const src = await this.getSource(sourceId);
    if (!src || src.tenantId !== tenantId) throw errors.notFound(`source ${sourceId} not found`);
    await this.#redis.hdel(this.#keys.sources, sourceId);
    await this.#publish({ kind: 'source', tenantId, id: sourceId });
  }

  /** Every source of every tenant (one HGETALL): the ingest role's per-path body-cap table. */
  async listAllSources(): Promise<Source[]> {
    const all = await this.#redis.hgetall(this.#keys.sources);
    return Object.values(all).map((raw) => JSON.parse(raw) as Source);
  }
}

interface Entry<T> {
  value: T;
  at: number;
}

/**
 * Read-through cache of the config for workers and ingest. A change published by any admin drops
 * the entry at once; entries also expire after `ttlMs` so a missed message costs at most that
 * (pause/resume must reach every worker within 1 s).
 */
export class ConfigCache implements SourceDirectory {
  readonly #store: ConfigStore;
  readonly #ttlMs: number;
  readonly #tenants = new Map<string, Entry<Tenant | undefined>>();
  readonly #endpoints = new Map<string, Entry<Endpoint[]>>();
  readonly #sources = new Map<string, Entry<Source | undefined>>();
  #sub: RedisClient | undefined;
  readonly #listeners = new Set<(c: Change) => void>();

  constructor(store: ConfigStore, opts: { ttlMs?: number } = {}) {
    this.#store = store;
    this.#ttlMs = opts.ttlMs ?? 500;
  }

  /** Subscribes to changes on a dedicated connection (`sub` must not be used for anything else). */
  async subscribe(sub: RedisClient, keys: Keys, logger?: Logger): Promise<void> {
    this.#sub = sub;
    sub.on('message', (_channel: string, message: string) => {
      let change: Change;
      try {
        change = JSON.parse(message) as Change;
      } catch {
        logger?.warn({ message }, 'ignoring malformed config change');
        return;
      }
      this.invalidate(change);
      for (const l of this.#listeners) l(change);
    });
    await sub.subscribe(keys.changes);
  }

  /** Called on every change (after the cache dropped it). */
  onChange(listener: (c: Change) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  invalidate(change: Change): void {
    if (change.kind === 'tenant') {
      this.#tenants.delete(change.tenantId);
      this.#endpoints.delete(change.tenantId);
    } else if (change.kind === 'endpoint') this.#endpoints.delete(change.tenantId);
    else this.#sources.delete(change.id);
  }

  #fresh<T>(e: Entry<T> | undefined): e is Entry<T> {
    return e !== undefined && Date.now() - e.at < this.#ttlMs;
  }

  tenant(tenantId: string): Promise<Tenant | undefined> {
    return this.#cached(this.#tenants, tenantId, () => this.#store.getTenant(tenantId));
  }

  endpoints(tenantId: string): Promise<Endpoint[]> {
    return this.#cached(this.#endpoints, tenantId, () => this.#store.listEndpoints(tenantId));
  }

  get(sourceId: string): Promise<Source | undefined> {
    return this.#cached(this.#sources, sourceId, () => this.#store.getSource(sourceId));
  }

  /** The fresh cached value, or a load from the store (cached with the time it was read). */
  async #cached<T>(map: Map<string, Entry<T>>, key: string, load: () => Promise<T>): Promise<T> {
    const e = map.get(key);
    if (this.#fresh(e)) return e.value;
    const value = await load();
    map.set(key, { value, at: Date.now() });
    return value;
  }

  async close(): Promise<void> {
    this.#sub?.disconnect();
    this.#sub = undefined;
  }
}

/** `*` matches all; `order.*` matches `order.created` (and deeper: `order.item.added`); else exact. */
export function matchesEventType(patterns: readonly string[], type: string): boolean {
  for (const p of patterns) {
    if (p === '*' || p === type) return true;
    if (p.endsWith('.*') && type.startsWith(p.slice(0, -1))) return true;
  }
  return false;
}

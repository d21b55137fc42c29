import { randomBytes } from 'node:crypto';
import {
  type Ed25519KeyPair,
  type Endpoint,
  type EndpointAuth,
  errors,
  type Keys,
  type Logger,
  type PreviousSecret,
  type RedisClient,
  type SecretBox,
  type Source,
  type SourceDirectory,
  type Tenant,
  tenantTag,
} from '@spillway/shared';
import { type RouterCommands, withCommands } from '../commands/index.ts';
import { pipelineByTag } from '../records/pipeline.ts';

/** A tenant and its endpoints as stored (readTenantConfig). */
export interface TenantConfig {
  tenant: Tenant | undefined;
  endpoints: Endpoint[];
  /**
   * The tenant's config revision read just before them (keys.configRev): what is here is at least
   * as new as that revision. Undefined when the tenant has none (gone, or not written since
   * revisions exist).
   */
  rev?: string;
}

/**
 * Tenants, endpoints and sources, stored in Redis:
 *   keys.tenants              SET of tenant ids
 *   keys.tenant(tenantId)          STRING Tenant JSON
 *   keys.endpoints(tenantId)       HASH endpointId → Endpoint JSON
 *   keys.sources              HASH sourceId → Source JSON (ingest knows only the source id)
 * Every write publishes a Change on keys.changes so that caches in other processes drop it.
 *
 * Secrets (an endpoint's or a source's `secret` and `previousSecrets[].secret`) are stored sealed
 * with the SecretBox (AES-256-GCM under SPILLWAY_SECRET_KEY, see @spillway/shared secret-box.ts)
 * and opened here on every read, so the worker's signer and ingest's verifiers see plaintext and
 * nothing else in the process needs the key. A secret stored before encryption existed reads as
 * itself and is sealed the next time its record is written, or by `reencryptSecrets`.
 */
export interface Change {
  kind: 'tenant' | 'endpoint' | 'source';
  tenantId: string;
  id: string;
}

/**
 * What holds secrets: endpoints and sources. Sealed are the signing or verification `secret` and
 * the replaced ones still live, and an endpoint's delivery credentials (`auth.password`,
 * `auth.token`) and Ed25519 private key (`ed25519.privateKey`); the public key and user name are not
 * secret.
 */
interface WithSecrets {
  id: string;
  tenantId: string;
  secret: string;
  previousSecrets?: PreviousSecret[];
  auth?: EndpointAuth;
  ed25519?: Ed25519KeyPair;
}

function mapSecrets<T extends WithSecrets>(v: T, f: (secret: string) => string): T {
  const out: T = { ...v, secret: f(v.secret) };
  if (v.previousSecrets) out.previousSecrets = v.previousSecrets.map((p) => ({ ...p, secret: f(p.secret) }));
  if (v.auth)
    out.auth =
      v.auth.type === 'basic'
        ? { ...v.auth, password: f(v.auth.password) }
        : { ...v.auth, token: f(v.auth.token) };
  if (v.ed25519) out.ed25519 = { ...v.ed25519, privateKey: f(v.ed25519.privateKey) };
  return out;
}

const secretsOf = (v: WithSecrets) => {
  const out = [v.secret, ...(v.previousSecrets ?? []).map((p) => p.secret)];
  if (v.auth) out.push(v.auth.type === 'basic' ? v.auth.password : v.auth.token);
  if (v.ed25519) out.push(v.ed25519.privateKey);
  return out;
};

/**
 * An incarnation stamp (Tenant.gen, Endpoint.gen): 48 random bits in 8 base64url characters, which
 * every spilled, retried or dead-lettered task carries, so it is kept short.
 */
const newGen = () => randomBytes(6).toString('base64url');
const keepGen = <T extends { gen?: string }>(cur: T, next: T): T =>
  cur.gen === undefined ? next : { ...next, gen: cur.gen };

/** The additional authenticated data of a record's secrets: a ciphertext opens only in its own record. */
const endpointContext = (v: { tenantId: string; id: string }) => `endpoint:${v.tenantId}:${v.id}`;
const sourceContext = (v: { tenantId: string; id: string }) => `source:${v.tenantId}:${v.id}`;

/** What `reencryptSecrets` did. */
export interface ReencryptReport {
  /** The key everything is sealed under now (SPILLWAY_SECRET_KEY's id). */
  keyId: string;
  endpoints: { scanned: number; reencrypted: number };
  sources: { scanned: number; reencrypted: number };
  /** Records that could not be opened (sealed under a key not configured, or altered): left as they are. */
  failed: { kind: 'endpoint' | 'source'; tenantId: string; id: string; message: string }[];
}

/**
 * Bytes of stored records readTenantConfig keeps opened (their stored forms; the opened objects are
 * about as large). Past it the memo starts over, so forms an update replaced do not pile up.
 */
const FRESH_MEMO_BYTES = 8 * 1024 * 1024;

/** Endpoints in the order they were created (then by id). */
function byCreation(a: Endpoint, b: Endpoint): number {
  return a.createdAt.localeCompare(b.createdAt) || a.id.localeCompare(b.id);
}

export class ConfigStore {
  readonly #redis: RedisClient & RouterCommands;
  readonly #keys: Keys;
  readonly #box: SecretBox;
  /** Stored form → the frozen record it opens to (readTenantConfig), and the forms' length. */
  readonly #fresh = new Map<string, object>();
  #freshBytes = 0;

  constructor(redis: RedisClient, keys: Keys, secrets: SecretBox) {
    this.#redis = withCommands(redis);
    this.#keys = keys;
    this.#box = secrets;
  }

  #seal<T extends WithSecrets>(v: T, context: string): string {
    return JSON.stringify(mapSecrets(v, (s) => this.#box.seal(s, context)));
  }

  #open<T extends WithSecrets>(raw: string, context: (v: T) => string): T {
    const v = JSON.parse(raw) as T;
    const ctx = context(v);
    return mapSecrets(v, (s) => this.#box.open(s, ctx));
  }

  #openTenant = (raw: string): Tenant => JSON.parse(raw) as Tenant;
  #openEndpoint = (raw: string): Endpoint => this.#open<Endpoint>(raw, endpointContext);
  #openSource = (raw: string): Source => this.#open<Source>(raw, sourceContext);

  /**
   * After a write of a tenant or its endpoints, before the caller is answered: a new config revision
   * (`commands/config-rev-2.lua`), so an event accepted after the answer carries a revision that no
   * worker's older view has, and its fan-out reads the config (docs/architecture.md, "Config
   * revisions").
   */
  async #revise(tenantId: string): Promise<void> {
    await this.#redis.configRev(
      this.#keys.tenant(tenantId),
      this.#keys.configRev(tenantId),
      randomBytes(9).toString('base64url'),
    );
  }

  async #publish(change: Change): Promise<void> {
    await this.#redis.publish(this.#keys.changes, JSON.stringify(change));
  }

  // --- tenants -------------------------------------------------------------------------------

  /**
   * Creates the tenant with a fresh incarnation (`gen`); SPW_ERR_CONFLICT when the id exists.
   * A tenant deleted and created again under its id is another tenant: tasks and history of the
   * old one are not the new one's (Endpoint.gen, docs/architecture.md "Id reuse").
   */
  async createTenant(input: Tenant): Promise<Tenant> {
    const tenant: Tenant = { ...input, gen: newGen() };
    const ok = await this.#redis.set(this.#keys.tenant(tenant.id), JSON.stringify(tenant), 'NX');
    if (ok !== 'OK') throw errors.conflict(`tenant ${tenant.id} already exists`);
    await this.#revise(tenant.id);
    await this.#redis.sadd(this.#keys.tenants, tenant.id);
    await this.#publish({ kind: 'tenant', tenantId: tenant.id, id: tenant.id });
    return tenant;
  }

  async getTenant(tenantId: string): Promise<Tenant | undefined> {
    const raw = await this.#redis.get(this.#keys.tenant(tenantId));
    return raw ? this.#openTenant(raw) : undefined;
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
    const cur = await this.requireTenant(tenantId);
    // An update never makes another incarnation.
    const next = keepGen(cur, update(cur));
    await this.#redis.set(this.#keys.tenant(tenantId), JSON.stringify(next), 'XX');
    await this.#revise(tenantId);
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
      this.#keys.configRev(tenantId),
      this.#keys.dlq(tenantId),
      this.#keys.tenantCounters(tenantId),
    );
    await this.#redis.srem(this.#keys.tenants, tenantId);
    await this.#publish({ kind: 'tenant', tenantId, id: tenantId });
  }

  // --- endpoints -----------------------------------------------------------------------------

  /** Creates the endpoint with a fresh incarnation (`gen`, which tasks carry); SPW_ERR_CONFLICT when the id exists. */
  async createEndpoint(input: Endpoint): Promise<Endpoint> {
    const ep: Endpoint = { ...input, gen: newGen() };
    await this.requireTenant(ep.tenantId);
    const ok = await this.#redis.hsetnx(
      this.#keys.endpoints(ep.tenantId),
      ep.id,
      this.#seal(ep, endpointContext(ep)),
    );
    if (ok !== 1) throw errors.conflict(`endpoint ${ep.id} already exists`);
    await this.#revise(ep.tenantId);
    await this.#publish({ kind: 'endpoint', tenantId: ep.tenantId, id: ep.id });
    return ep;
  }

  async getEndpoint(tenantId: string, endpointId: string): Promise<Endpoint | undefined> {
    const raw = await this.#redis.hget(this.#keys.endpoints(tenantId), endpointId);
    return raw ? this.#openEndpoint(raw) : undefined;
  }

  async requireEndpoint(tenantId: string, endpointId: string): Promise<Endpoint> {
    const ep = await this.getEndpoint(tenantId, endpointId);
    if (!ep) throw errors.notFound(`endpoint ${endpointId} not found`);
    return ep;
  }

  async listEndpoints(tenantId: string): Promise<Endpoint[]> {
    const all = await this.#redis.hgetall(this.#keys.endpoints(tenantId));
    return Object.values(all).map(this.#openEndpoint).sort(byCreation);
  }

  /**
   * The tenant and its endpoints as stored now, in ONE round trip (both keys carry the tenant's
   * hash tag). A record whose stored form has not changed comes back as the same frozen object as
   * last time: no JSON parse or secret decryption per job, and what delivery caches per endpoint
   * object (its plan) keeps hitting. The memo is bounded (FRESH_MEMO_BYTES of stored forms; past
   * it, it starts over).
   */
  async readTenantConfig(tenantId: string): Promise<TenantConfig> {
    return (await this.readTenantConfigs([tenantId])).get(tenantId)!;
  }

  /**
   * readTenantConfig for several tenants in one round trip (one pipeline per hash tag on a
   * cluster): the worker's fan-out reads every tenant of a job this way when its view is older
   * than the job's config revision (read-your-writes: an endpoint created before an event was
   * accepted gets the event). The revision is read first, so the config that follows is at least
   * as new as it. A failed read throws.
   */
  async readTenantConfigs(tenantIds: readonly string[]): Promise<Map<string, TenantConfig>> {
    const res = await pipelineByTag(
      this.#redis,
      tenantIds,
      (tid) => tenantTag(tid),
      (pipe, tid) => {
        pipe.get(this.#keys.configRev(tid)).get(this.#keys.tenant(tid)).hgetall(this.#keys.endpoints(tid));
      },
    );
    const configs = new Map<string, TenantConfig>();
    tenantIds.forEach((tid, i) => {
      const r = res[i]!;
      const [rErr, rev] = r[0]!;
      const [tErr, tRaw] = r[1]!;
      const [eErr, eRaw] = r[2]!;
      if (rErr) throw rErr;
      if (tErr) throw tErr;
      if (eErr) throw eErr;
      const tenant = typeof tRaw === 'string' ? this.#memoized(tRaw, this.#openTenant) : undefined;
      const endpoints = Object.values(eRaw as Record<string, string>)
        .map((raw) => this.#memoized(raw, this.#openEndpoint))
        .sort(byCreation);
      configs.set(tid, { tenant, endpoints, ...(typeof rev === 'string' ? { rev } : {}) });
    });
    return configs;
  }

  /** Several tenants' config revisions (keys.configRev) in one round trip; a tenant without one is left out. */
  async readRevisions(tenantIds: readonly string[]): Promise<Map<string, string>> {
    const res = await pipelineByTag(
      this.#redis,
      tenantIds,
      (tid) => tenantTag(tid),
      (pipe, tid) => {
        pipe.get(this.#keys.configRev(tid));
      },
    );
    const revs = new Map<string, string>();
    tenantIds.forEach((tid, i) => {
      const [err, rev] = res[i]![0]!;
      if (err) throw err;
      if (typeof rev === 'string') revs.set(tid, rev);
    });
    return revs;
  }

  #memoized<T extends object>(raw: string, open: (raw: string) => T): T {
    const hit = this.#fresh.get(raw);
    if (hit) return hit as T;
    const v = Object.freeze(open(raw));
    if (this.#freshBytes + raw.length > FRESH_MEMO_BYTES) {
      this.#fresh.clear();
      this.#freshBytes = 0;
    }
    this.#fresh.set(raw, v);
    this.#freshBytes += raw.length;
    return v;
  }

  async updateEndpoint(
    tenantId: string,
    endpointId: string,
    update: (ep: Endpoint) => Endpoint,
  ): Promise<Endpoint> {
    const cur = await this.requireEndpoint(tenantId, endpointId);
    // An update never makes another incarnation (its tasks stay its own).
    const next = keepGen(cur, update(cur));
    await this.#redis.hset(
      this.#keys.endpoints(tenantId),
      endpointId,
      this.#seal(next, endpointContext(next)),
    );
    await this.#revise(tenantId);
    await this.#publish({ kind: 'endpoint', tenantId, id: endpointId });
    return next;
  }

  async deleteEndpoint(tenantId: string, endpointId: string): Promise<void> {
    const n = await this.#redis.hdel(this.#keys.endpoints(tenantId), endpointId);
    if (n !== 1) throw errors.notFound(`endpoint ${endpointId} not found`);
    await this.#revise(tenantId);
    await this.#publish({ kind: 'endpoint', tenantId, id: endpointId });
  }

  // --- sources -------------------------------------------------------------------------------

  async createSource(src: Source): Promise<Source> {
    await this.requireTenant(src.tenantId);
    const ok = await this.#redis.hsetnx(this.#keys.sources, src.id, this.#seal(src, sourceContext(src)));
    if (ok !== 1) throw errors.conflict(`source ${src.id} already exists`);
    await this.#publish({ kind: 'source', tenantId: src.tenantId, id: src.id });
    return src;
  }

  async getSource(sourceId: string): Promise<Source | undefined> {
    const raw = await this.#redis.hget(this.#keys.sources, sourceId);
    return raw ? this.#openSource(raw) : undefined;
  }

  /** The tenant's source; SPW_ERR_NOT_FOUND for an unknown id or another tenant's source (not a leak). */
  async requireSource(tenantId: string, sourceId: string): Promise<Source> {
    const src = await this.getSource(sourceId);
    if (!src || src.tenantId !== tenantId) throw errors.notFound(`source ${sourceId} not found`);
    return src;
  }

  /** Read-modify-write of one source (admin is the only writer; last write wins). */
  async updateSource(tenantId: string, sourceId: string, update: (src: Source) => Source): Promise<Source> {
    const next = update(await this.requireSource(tenantId, sourceId));
    await this.#redis.hset(this.#keys.sources, sourceId, this.#seal(next, sourceContext(next)));
    await this.#publish({ kind: 'source', tenantId, id: sourceId });
    return next;
  }

  async listSources(tenantId: string): Promise<Source[]> {
    const all = await this.#redis.hgetall(this.#keys.sources);
    return Object.values(all)
      .filter((raw) => (JSON.parse(raw) as Source).tenantId === tenantId)
      .map(this.#openSource)
      .sort((a, b) => a.createdAt.localeCompare(b.createdAt) || a.id.localeCompare(b.id));
  }

  async deleteSource(tenantId: string, sourceId: string): Promise<void> {
    await this.requireSource(tenantId, sourceId);
    await this.#redis.hdel(this.#keys.sources, sourceId);
    await this.#publish({ kind: 'source', tenantId, id: sourceId });
  }

  /** Every source of every tenant (one HGETALL): the ingest role's per-path body-cap table. */
  async listAllSources(): Promise<Source[]> {
    const all = await this.#redis.hgetall(this.#keys.sources);
    return Object.values(all).map(this.#openSource);
  }

  // --- key rotation --------------------------------------------------------------------------

  /**
   * Seals every stored secret that is not under SPILLWAY_SECRET_KEY yet (plaintext from before
   * encryption, or sealed under a key in SPILLWAY_SECRET_KEY_PREVIOUS) under it. Walks the tenants
   * set and every endpoints hash, then the sources hash, with SSCAN/HSCAN (bounded batches). Each
   * record is replaced only if it still holds what was read (commands/config-swap-1.lua), so an
   * admin write made meanwhile is never undone; such a record is read again (it was sealed under the
   * current key by that write, unless the writer still ran an older key). Idempotent: a second run
   * rewrites nothing. Plaintext is unchanged, so no change is published.
   */
  async reencryptSecrets(): Promise<ReencryptReport> {
    const report: ReencryptReport = {
      keyId: this.#box.keyId,
      endpoints: { scanned: 0, reencrypted: 0 },
      sources: { scanned: 0, reencrypted: 0 },
      failed: [],
    };
    const redis = this.#redis;
    const one = async (
      kind: 'endpoint' | 'source',
      hash: string,
      field: string,
      raw: string,
    ): Promise<boolean> => {
      const context = kind === 'endpoint' ? endpointContext : sourceContext;
      let current: string | null = raw;
      // Bounded: a record rewritten by admins three times while we look at it is left for the next run.
      for (let attempt = 0; attempt < 3 && current !== null; attempt++) {
        const v = JSON.parse(current) as WithSecrets;
        if (secretsOf(v).every((s) => this.#box.state(s) === 'current')) return false;
        let next: string;
        try {
          const ctx = context(v);
          next = JSON.stringify(mapSecrets(v, (s) => this.#box.seal(this.#box.open(s, ctx), ctx)));
        } catch (err) {
          report.failed.push({ kind, tenantId: v.tenantId, id: v.id, message: (err as Error).message });
          return false;
        }
        if ((await redis.configSwap(hash, field, current, next)) === 1) return true;
        current = await this.#redis.hget(hash, field);
      }
      return false;
    };
    const scanHash = async (
      kind: 'endpoint' | 'source',
      hash: string,
      counts: { scanned: number; reencrypted: number },
    ) => {
      let cursor = '0';
      do {
        const [next, flat] = await this.#redis.hscan(hash, cursor, 'COUNT', 200);
        cursor = next;
        for (let i = 0; i + 1 < flat.length; i += 2) {
          counts.scanned++;
          if (await one(kind, hash, flat[i]!, flat[i + 1]!)) counts.reencrypted++;
        }
      } while (cursor !== '0');
    };
    let cursor = '0';
    do {
      const [next, tenantIds] = await this.#redis.sscan(this.#keys.tenants, cursor, 'COUNT', 200);
      cursor = next;
      for (const tid of tenantIds) await scanHash('endpoint', this.#keys.endpoints(tid), report.endpoints);
    } while (cursor !== '0');
    await scanHash('source', this.#keys.sources, report.sources);
    return report;
  }
}

/**
 * One map of the cache: entries reused for `ttlMs`, at most `max` of them (least recently used go
 * first), and concurrent loads of one key share one Redis call. A load that was in flight when its
 * key changed still answers its callers but does not store what it read before the change.
 */
class Slot<T> {
  readonly #entries = new Map<string, { value: T; at: number }>();
  readonly #loading = new Map<string, { promise: Promise<T>; stale: boolean }>();
  readonly #ttlMs: number;
  readonly #max: number;

  constructor(ttlMs: number, max: number) {
    this.#ttlMs = ttlMs;
    this.#max = max;
  }

  get size(): number {
    return this.#entries.size;
  }

  get(key: string, load: () => Promise<T>): Promise<T> {
    const e = this.#entries.get(key);
    if (e && Date.now() - e.at < this.#ttlMs) {
      // Map order is the LRU order: re-insert on use.
      this.#entries.delete(key);
      this.#entries.set(key, e);
      return Promise.resolve(e.value);
    }
    const inflight = this.#loading.get(key);
    if (inflight) return inflight.promise;
    const rec = { promise: undefined as unknown as Promise<T>, stale: false };
    const done = () => {
      if (this.#loading.get(key) === rec) this.#loading.delete(key);
    };
    rec.promise = load().then(
      (value) => {
        done();
        if (!rec.stale) {
          this.#entries.delete(key);
          this.#entries.set(key, { value, at: Date.now() });
          while (this.#entries.size > this.#max)
            this.#entries.delete(this.#entries.keys().next().value as string);
        }
        return value;
      },
      (err: unknown) => {
        done();
        throw err;
      },
    );
    this.#loading.set(key, rec);
    return rec.promise;
  }

  drop(key: string): void {
    this.#entries.delete(key);
    const rec = this.#loading.get(key);
    if (rec) {
      rec.stale = true;
      this.#loading.delete(key);
    }
  }

  clear(): void {
    this.#entries.clear();
    for (const rec of this.#loading.values()) rec.stale = true;
    this.#loading.clear();
  }
}

/**
 * The one config cache, read through by the worker (tenant views, endpoints) and by ingest
 * (sources). A change published by any admin drops the entry at once; entries also expire after
 * `ttlMs`, so a missed message costs at most that (pause/resume must reach every worker within
 * 1 s). Bounded, because ingest looks up ids that come from strangers: a flood of random
 * `/ingest/<id>` paths remembers each miss for `ttlMs`, but only the `maxEntries` most recent.
 * (The worker's Engine keeps a synchronous snapshot per tenant it holds work for, made from this
 * cache: worker/engine.ts `view`.)
 */
export class ConfigCache implements SourceDirectory {
  readonly #store: ConfigStore;
  readonly #tenants: Slot<Tenant | undefined>;
  readonly #endpoints: Slot<Endpoint[]>;
  readonly #sources: Slot<Source | undefined>;
  #sub: RedisClient | undefined;
  readonly #listeners = new Set<(c: Change) => void>();

  constructor(store: ConfigStore, opts: { ttlMs?: number; maxEntries?: number } = {}) {
    this.#store = store;
    const ttl = opts.ttlMs ?? 500;
    const max = Math.max(1, opts.maxEntries ?? 10_000);
    this.#tenants = new Slot(ttl, max);
    this.#endpoints = new Slot(ttl, max);
    this.#sources = new Slot(ttl, max);
  }

  /** Subscribes to changes on a dedicated connection (`sub` must not be used for anything else). */
  async subscribe(sub: RedisClient, keys: Keys, logger?: Logger): Promise<void> {
    this.#sub = sub;
    // After a reconnect ioredis subscribes again by itself, on a promise no one holds: closing
    // while that reply was on the way rejected it ("Connection is closed.") as an unhandled
    // rejection (seen in CI: a role shut down just after Redis came back). So this cache subscribes
    // again itself on every "ready", its failure logged.
    // (On Redis Cluster the option is not read and both subscribe: twice to a channel is once.)
    (sub.options as { autoResubscribe?: boolean }).autoResubscribe = false;
    sub.on('ready', () => {
      if (this.#sub !== sub) return;
      sub.subscribe(keys.changes).catch((err: unknown) => {
        if (this.#sub === sub)
          logger?.warn({ err }, 'config changes: could not subscribe again after a reconnect');
      });
    });
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
      this.#tenants.drop(change.tenantId);
      this.#endpoints.drop(change.tenantId);
      // A tenant deleted with its sources publishes one change for the tenant, none per source.
      this.#sources.clear();
    } else if (change.kind === 'endpoint') this.#endpoints.drop(change.tenantId);
    else this.#sources.drop(change.id);
  }

  tenant(tenantId: string): Promise<Tenant | undefined> {
    return this.#tenants.get(tenantId, () => this.#store.getTenant(tenantId));
  }

  endpoints(tenantId: string): Promise<Endpoint[]> {
    return this.#endpoints.get(tenantId, () => this.#store.listEndpoints(tenantId));
  }

  get(sourceId: string): Promise<Source | undefined> {
    return this.#sources.get(sourceId, () => this.#store.getSource(sourceId));
  }

  /** Entries held (tenants, endpoint lists and sources together). */
  get size(): number {
    return this.#tenants.size + this.#endpoints.size + this.#sources.size;
  }

  async close(): Promise<void> {
    this.#sub?.disconnect();
    this.#sub = undefined;
  }
}

/**
 * `*` matches all; `order.*` matches `order.created` (and deeper: `order.item.added`); `orders/*`
 * matches `orders/create` (Shopify topics); else exact. The separator before `*` must match too:
 * `orders.*` does not match `orders/create`.
 */
export function matchesEventType(patterns: readonly string[], type: string): boolean {
  for (const p of patterns) {
    if (p === '*' || p === type) return true;
    if ((p.endsWith('.*') || p.endsWith('/*')) && type.startsWith(p.slice(0, -1))) return true;
  }
  return false;
}

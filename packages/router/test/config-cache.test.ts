import { withCommands } from '@spillway/router/testing';
import { createRedis, type Source } from '@spillway/shared';
import { afterEach, describe, expect, it } from 'vitest';
import { makeEndpoint, makeTenant, routerRuntime } from '../../../test/helpers/router-fixtures.ts';
import { ConfigCache, ConfigStore, type Runtime } from '../src/index.ts';

/**
 * The one config cache (config/store.ts ConfigCache) on a real Redis: the worker reads tenants and
 * endpoints through it, ingest reads sources through it. Ingest looks up ids that strangers choose,
 * so it must stay bounded, and a burst for one cold id must cost one Redis read.
 */
const cleanup: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

/** A real ConfigStore that counts its source reads and can hold them at a gate. */
class CountingStore extends ConfigStore {
  loads = 0;
  gate: Promise<void> = Promise.resolve();
  override async getSource(sourceId: string): Promise<Source | undefined> {
    this.loads++;
    const read = super.getSource(sourceId);
    await this.gate;
    return read;
  }
}

async function storeOn(rt: Runtime): Promise<CountingStore> {
  const store = new CountingStore(rt.redis, rt.keys, rt.secrets);
  await makeTenant(store, {}, 't1');
  return store;
}

async function runtime(): Promise<Runtime> {
  const rt = routerRuntime();
  cleanup.push(() => rt.close());
  return rt;
}

const source = (id: string, secret: string, tenantId = 't1'): Source => ({
  id,
  tenantId,
  kind: 'github',
  secret,
  maxBodyBytes: 1024,
  createdAt: new Date().toISOString(),
});

describe('ConfigCache', () => {
  it('stays bounded under a flood of unknown ids, and shares one load between concurrent lookups', async () => {
    const rt = await runtime();
    const store = await storeOn(rt);
    await store.createSource(source('real', 'whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQ='));
    const cache = new ConfigCache(store, { maxEntries: 100, ttlMs: 60_000 });
    for (let i = 0; i < 2000; i++) expect(await cache.get(`junk-${i}`)).toBeUndefined();
    expect(cache.size).toBe(100);
    store.loads = 0;
    const all = await Promise.all(Array.from({ length: 50 }, () => cache.get('real')));
    expect(all.every((s) => s?.id === 'real')).toBe(true);
    expect(store.loads).toBe(1);
    await cache.get('real');
    expect(store.loads).toBe(1);
  });

  it('a change drops the entry, and a read in flight during the change does not store its stale answer', async () => {
    const rt = await runtime();
    const store = await storeOn(rt);
    const cache = new ConfigCache(store, { ttlMs: 60_000 });
    await store.createSource(source('a', 'whsec_djEtc2VjcmV0LXNlY3JldC1zZWNyZXQ='));
    const first = (await cache.get('a'))?.secret;
    let release: () => void = () => {};
    store.gate = new Promise((r) => {
      release = r;
    });
    cache.invalidate({ kind: 'source', tenantId: 't1', id: 'a' });
    const inflight = cache.get('a');
    // The read has left for Redis; the source changes behind it.
    await new Promise((r) => setTimeout(r, 20));
    await rt.redis.hdel(rt.keys.sources, 'a');
    await store.createSource(source('a', 'whsec_djItc2VjcmV0LXNlY3JldC1zZWNyZXQ='));
    cache.invalidate({ kind: 'source', tenantId: 't1', id: 'a' });
    release();
    expect((await inflight)?.secret).toBe(first);
    store.gate = Promise.resolve();
    const now = (await cache.get('a'))?.secret;
    expect(now).toBe('whsec_djItc2VjcmV0LXNlY3JldC1zZWNyZXQ=');
    expect(now).not.toBe(first);
  });

  it('a tenant change drops every source (a tenant deleted with its sources publishes one change)', async () => {
    const rt = await runtime();
    const store = await storeOn(rt);
    const cache = new ConfigCache(store, { ttlMs: 60_000 });
    await store.createSource(source('s1', 'whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQ='));
    expect((await cache.get('s1'))?.id).toBe('s1');
    await rt.redis.hdel(rt.keys.sources, 's1');
    expect((await cache.get('s1'))?.id).toBe('s1');
    cache.invalidate({ kind: 'tenant', tenantId: 't1', id: 't1' });
    expect(await cache.get('s1')).toBeUndefined();
  });
});

describe('ConfigStore.readTenantConfig (the fan-out read, once per job)', () => {
  it('reads tenant and endpoints in one round trip; an unchanged record is the same object, a changed one a new one', async () => {
    const rt = await runtime();
    const store = await storeOn(rt);
    const a = await makeEndpoint(store, 't1', 'http://127.0.0.1:9/a', { id: 'a' });
    await makeEndpoint(store, 't1', 'http://127.0.0.1:9/b', { id: 'b' });
    const first = await store.readTenantConfig('t1');
    expect(first.tenant?.id).toBe('t1');
    expect(first.endpoints.map((e) => e.id)).toEqual(['a', 'b']);
    // Secrets come back opened, as listEndpoints gives them.
    expect(first.endpoints[0]!.secret).toBe(a.secret);
    const again = await store.readTenantConfig('t1');
    expect(again.tenant).toBe(first.tenant);
    expect(again.endpoints[0]).toBe(first.endpoints[0]);
    expect(again.endpoints[1]).toBe(first.endpoints[1]);
    // An update is a new stored form: a new object, with the new state.
    await store.updateEndpoint('t1', 'a', (e) => ({ ...e, status: 'paused' }));
    const after = await store.readTenantConfig('t1');
    expect(after.endpoints[0]).not.toBe(first.endpoints[0]);
    expect(after.endpoints[0]!.status).toBe('paused');
    expect(after.endpoints[1]).toBe(first.endpoints[1]);
    // Deleted: gone from the read, and an unknown tenant is undefined.
    await store.deleteEndpoint('t1', 'b');
    expect((await store.readTenantConfig('t1')).endpoints.map((e) => e.id)).toEqual(['a']);
    expect(await store.readTenantConfig('nobody')).toEqual({ tenant: undefined, endpoints: [] });
  });

  it('reads several tenants in one pipeline; every write of a tenant or its endpoints gives it a new config revision, read with them', async () => {
    const rt = await runtime();
    const store = await storeOn(rt);
    await makeTenant(store, {}, 't2');
    await makeEndpoint(store, 't1', 'http://127.0.0.1:9/a', { id: 'a' });
    await makeEndpoint(store, 't2', 'http://127.0.0.1:9/b', { id: 'b' });
    const read = await store.readTenantConfigs(['t1', 't2', 'nobody']);
    expect(read.get('t1')!.endpoints.map((e) => e.id)).toEqual(['a']);
    expect(read.get('t2')!.endpoints.map((e) => e.id)).toEqual(['b']);
    expect(read.get('nobody')).toEqual({ tenant: undefined, endpoints: [] });
    // The revision read is the one stored, and each tenant has its own.
    const rev = async (tid: string) => (await store.readTenantConfig(tid)).rev;
    const r1 = await rev('t1');
    expect(r1).toMatch(/^[\w-]{12}$/);
    expect(r1).toBe(await rt.redis.get(rt.keys.configRev('t1')));
    expect(await rev('t2')).not.toBe(r1);
    // Every write that changes what fan-out reads makes a new one.
    const seen = new Set([r1]);
    const next = async (write: () => Promise<unknown>) => {
      await write();
      const r = await rev('t1');
      expect(r).toBeDefined();
      expect(seen.has(r)).toBe(false);
      seen.add(r);
    };
    await next(() => store.updateTenant('t1', (t) => ({ ...t, status: 'paused' })));
    await next(() => makeEndpoint(store, 't1', 'http://127.0.0.1:9/c', { id: 'c' }));
    await next(() => store.updateEndpoint('t1', 'c', (e) => ({ ...e, status: 'paused' })));
    await next(() => store.deleteEndpoint('t1', 'c'));
    // A deleted tenant takes its revision with it, and a write that raced the deletion leaves none.
    await store.deleteTenant('t1');
    expect(await rt.redis.exists(rt.keys.configRev('t1'))).toBe(0);
    expect(
      await withCommands(rt.redis).configRev(rt.keys.tenant('t1'), rt.keys.configRev('t1'), 'late'),
    ).toBe(0);
    expect(await rt.redis.exists(rt.keys.configRev('t1'))).toBe(0);
    expect(await rev('t1')).toBeUndefined();
  });
});

describe('ConfigCache.close', () => {
  it('still hears changes after its subscriber reconnected (it subscribes again itself)', async () => {
    const rt = await runtime();
    const store = await storeOn(rt);
    const cache = new ConfigCache(store, { ttlMs: 60_000 });
    const sub = createRedis(rt.config.redis, { maxRetriesPerRequest: null });
    sub.on('error', () => {});
    await cache.subscribe(sub, rt.keys);
    cleanup.push(() => cache.close());
    const heard: string[] = [];
    cache.onChange((c) => heard.push(c.tenantId));
    const ready = new Promise((r) => sub.once('ready', r));
    sub.disconnect(true);
    await ready;
    // The subscription is back once a publish reaches us; keep changing until one does.
    for (let i = 0; i < 50 && heard.length === 0; i++) {
      await store.updateTenant('t1', (t) => ({ ...t, name: `n${i}` }));
      await new Promise((r) => setTimeout(r, 50));
    }
    expect(heard).toContain('t1');
  });

  it('leaves no rejected command behind when it closes while a resubscribe after a reconnect is unanswered', async () => {
    const rt = await runtime();
    const cache = new ConfigCache(new ConfigStore(rt.redis, rt.keys, rt.secrets), { ttlMs: 500 });
    // No ready check: "ready" comes at connect, so the resubscribe is sent while Redis is paused.
    const sub = createRedis(rt.config.redis, { maxRetriesPerRequest: null, enableReadyCheck: false });
    sub.on('error', () => {});
    await cache.subscribe(sub, rt.keys);
    const stray: unknown[] = [];
    const onStray = (err: unknown) => stray.push(err);
    process.on('unhandledRejection', onStray);
    try {
      // A reconnect (Redis restarted, a network blip) while Redis answers nothing for a moment:
      // the resubscribe waits for its reply when the process shuts down. ioredis's own resubscribe
      // has no one holding its promise, so closing rejected it ("Connection is closed.") unhandled.
      await rt.redis.call('CLIENT', 'PAUSE', '400', 'ALL');
      const closed = new Promise<void>((resolve) =>
        sub.once('ready', () => setImmediate(() => void cache.close().then(resolve))),
      );
      sub.disconnect(true);
      await closed;
      await new Promise((r) => setTimeout(r, 600));
    } finally {
      process.off('unhandledRejection', onStray);
    }
    expect(stray).toEqual([]);
    expect(sub.status).toBe('end');
  });
});

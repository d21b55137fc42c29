/**
 * What an ingest test posts to: a tenant and a GitHub source (secret `sec`, 64 KiB cap) written
 * straight into a Spillway's config (the admin API is not part of what those tests exercise).
 * Signed deliveries for it: ./github.ts.
 */
import { randomBytes } from 'node:crypto';
import { ConfigStore } from '@spillway/router';
import { createKeys, loadConfig, type Source, secretBoxOf } from '@spillway/shared';
import { Redis } from 'ioredis';

export interface SeedOptions extends Partial<Pick<Source, 'allowCidrs' | 'maxBodyBytes'>> {
  tenant?: string;
  sourceId?: string;
}

/** Writes the tenant (with room for a load) and its source through `store`. */
export async function seedGithubSourceIn(
  store: ConfigStore,
  opts: SeedOptions = {},
): Promise<{ tenant: string; sourceId: string; secret: string }> {
  const {
    tenant = `t-${randomBytes(3).toString('hex')}`,
    sourceId = `gh-${randomBytes(4).toString('hex')}`,
    ...extra
  } = opts;
  await store.createTenant({
    id: tenant,
    limits: { maxInFlight: 100_000, concurrency: 4 },
    status: 'active',
    createdAt: new Date().toISOString(),
  });
  await store.createSource({
    id: sourceId,
    tenantId: tenant,
    kind: 'github',
    secret: 'sec',
    maxBodyBytes: 65536,
    createdAt: new Date().toISOString(),
    ...extra,
  });
  return { tenant, sourceId, secret: 'sec' };
}

/**
 * The same for a Spillway started elsewhere with `env` (a testEnv): its Redis and prefix, secrets
 * sealed the way its config store seals them. Close the returned `redis` when done.
 */
export async function seedGithubSource(
  env: Record<string, string>,
  opts: SeedOptions = {},
): Promise<{ tenant: string; sourceId: string; secret: string; redis: Redis }> {
  const redis = new Redis(env.SPILLWAY_REDIS_URL!);
  const store = new ConfigStore(redis, createKeys(env.SPILLWAY_PREFIX!), secretBoxOf(loadConfig(env)).box);
  return { ...(await seedGithubSourceIn(store, opts)), redis };
}

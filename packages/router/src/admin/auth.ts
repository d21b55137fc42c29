import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { errors, type Keys, type RedisClient } from '@spillway/shared';

/** Who is calling: the operator (admin token) or one tenant's API key. */
export type Principal = { kind: 'admin' } | { kind: 'tenant'; tenantId: string; keyId: string };

export interface ApiKeyRecord {
  id: string;
  tenantId: string;
  name?: string;
  createdAt: string;
  /** sha256 hex of the key: lets revocation find the global lookup entry. Never sent out. */
  hash: string;
}

function sha256(s: string): Buffer {
  return createHash('sha256').update(s).digest();
}

/**
 * Comparing digests keeps timingSafeEqual's equal-length precondition without leaking the token's
 * length, and the comparison time does not depend on where the first differing byte is.
 */
export function tokenChecker(adminToken: string): (given: string) => boolean {
  const expected = sha256(adminToken);
  return (given) => timingSafeEqual(sha256(given), expected);
}

export function bearer(header: string | undefined): string | undefined {
  if (!header) return undefined;
  const m = /^Bearer[ ]+(\S+)\s*$/i.exec(header);
  return m?.[1];
}

/**
 * Tenant API keys: `spk_` + 32 random bytes (base64url). Only their sha256 is stored:
 *   keys.tenantKeys(tid)  HASH keyId → ApiKeyRecord JSON (listing, revocation)
 *   keys.apiKeys          HASH sha256 hex → {"tenantId","id"} (lookup from the key alone)
 * A key carries 256 random bits, so an unsalted fast hash is enough: there is nothing to brute-force.
 */
export class ApiKeys {
  readonly #redis: RedisClient;
  readonly #keys: Keys;

  /** `rt`: the process's Runtime (or anything with its command connection and key builder). */
  constructor(rt: { redis: RedisClient; keys: Keys }) {
    this.#redis = rt.redis;
    this.#keys = rt.keys;
  }

  async create(
    tenantId: string,
    name?: string,
  ): Promise<{ record: Omit<ApiKeyRecord, 'hash'>; key: string }> {
    const key = `spk_${randomBytes(32).toString('base64url')}`;
    const id = `key_${randomBytes(8).toString('hex')}`;
    const hash = sha256(key).toString('hex');
    const record: ApiKeyRecord = {
      id,
      tenantId,
      ...(name === undefined ? {} : { name }),
      createdAt: new Date().toISOString(),
      hash,
    };
    // The tenant's list first, the lookup last: a key is usable only once it can also be revoked.
    await this.#redis.hset(this.#keys.tenantKeys(tenantId), id, JSON.stringify(record));
    await this.#redis.hset(this.#keys.apiKeys, hash, JSON.stringify({ tenantId, id }));
    const { hash: _omit, ...shown } = record;
    return { record: shown, key };
  }

  async list(tenantId: string): Promise<Omit<ApiKeyRecord, 'hash'>[]> {
    const all = await this.#redis.hgetall(this.#keys.tenantKeys(tenantId));
    return Object.values(all)
      .map((raw) => {
        const { hash: _omit, ...shown } = JSON.parse(raw) as ApiKeyRecord;
        return shown;
      })
      .sort((a, b) => a.createdAt.localeCompare(b.createdAt) || a.id.localeCompare(b.id));
  }

  async revoke(tenantId: string, keyId: string): Promise<void> {
    const raw = await this.#redis.hget(this.#keys.tenantKeys(tenantId), keyId);
    if (!raw) throw errors.notFound(`api key ${keyId} not found`);
    const rec = JSON.parse(raw) as ApiKeyRecord;
    // Lookup first: once it is gone the key stops working even if the second delete fails.
    await this.#redis.hdel(this.#keys.apiKeys, rec.hash);
    await this.#redis.hdel(this.#keys.tenantKeys(tenantId), keyId);
  }

  async revokeAll(tenantId: string): Promise<void> {
    for (const k of await this.#redis.hgetall(this.#keys.tenantKeys(tenantId)).then(Object.values)) {
      await this.#redis.hdel(this.#keys.apiKeys, (JSON.parse(k) as ApiKeyRecord).hash);
    }
    await this.#redis.del(this.#keys.tenantKeys(tenantId));
  }

  /** The tenant a presented key belongs to, or undefined. */
  async resolve(key: string): Promise<{ tenantId: string; id: string } | undefined> {
    if (!key.startsWith('spk_') || key.length > 100) return undefined;
    const raw = await this.#redis.hget(this.#keys.apiKeys, sha256(key).toString('hex'));
    return raw ? (JSON.parse(raw) as { tenantId: string; id: string }) : undefined;
  }
}

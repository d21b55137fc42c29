import type { Keys } from '@spillway/shared';

/**
 * Replays with a fresh id (issue 15). For GitHub and Shopify the event id and type come from
 * headers the HMAC does not cover (`X-GitHub-Delivery`, `X-Shopify-Webhook-Id`), so anyone holding
 * one signed body could replay it under a new id and have it delivered again. A provider's own
 * redelivery repeats the same body *and* the same id. So for these kinds the body is deduplicated
 * too: per source, on sha256(body), within the dedup window. The first id that claims a body owns it
 * for the window; the same id passes (its own retry: the intake's id dedup answers it); another id
 * is a duplicate of the owner.
 */
export interface ReplayGuard {
  /** Claims `bodySha256` (hex) for `eventId`; resolves with the owner's id when another id owns it. */
  claim(tenantId: string, sourceId: string, bodySha256: string, eventId: string): Promise<string | undefined>;
}

/** What the guard needs of a Redis client (ioredis `Redis` or `Cluster`). */
export interface ReplayRedis {
  set(key: string, value: string, px: 'PX', ms: number, nx: 'NX'): Promise<'OK' | null>;
  get(key: string): Promise<string | null>;
}

/**
 * The guard on Redis: one `SET NX PX` per event (its owner is the expiry: the dedup window). The
 * key lives in the tenant's dedup namespace (`Keys.dedup`) under a name no event id can take (ids
 * are printable ASCII without spaces).
 */
export function createRedisReplayGuard(redis: ReplayRedis, keys: Keys, windowMs: number): ReplayGuard {
  return {
    async claim(tenantId, sourceId, bodySha256, eventId) {
      const key = keys.dedup(tenantId, `body ${sourceId} ${bodySha256}`);
      if ((await redis.set(key, eventId, 'PX', windowMs, 'NX')) === 'OK') return undefined;
      const owner = await redis.get(key);
      // Expired between the two calls: nobody owns it any more; the next one will.
      return owner === null || owner === eventId ? undefined : owner;
    },
  };
}

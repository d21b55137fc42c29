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
  pipeline(): ReplayPipeline;
}
interface ReplayPipeline {
  set(key: string, value: string, px: 'PX', ms: number, nx: 'NX', get: 'GET'): unknown;
  exec(): Promise<[Error | null, unknown][] | null>;
}

interface Pending {
  key: string;
  eventId: string;
  resolve(owner: string | undefined): void;
  reject(err: unknown): void;
}

/**
 * The guard on Redis: one `SET key id PX window NX GET` per event (Redis ≥ 7.0: sets only if absent
 * and returns the previous owner; the expiry is the key's owner), batched: the claims made in one
 * event-loop turn go out as one pipeline per tenant (one round trip, like the intake's group
 * commit; one tenant's keys share a hash slot, so a pipeline never spans Cluster slots). The key
 * lives in the tenant's dedup namespace (`Keys.dedup`) under a name no event id can take (ids are
 * printable ASCII without spaces).
 */
export function createRedisReplayGuard(redis: ReplayRedis, keys: Keys, windowMs: number): ReplayGuard {
  let queued = new Map<string, Pending[]>();
  let scheduled = false;

  const flush = () => {
    scheduled = false;
    const batch = queued;
    queued = new Map();
    for (const claims of batch.values()) {
      const pipe = redis.pipeline();
      for (const c of claims) pipe.set(c.key, c.eventId, 'PX', windowMs, 'NX', 'GET');
      pipe.exec().then(
        (results) => {
          claims.forEach((c, i) => {
            const [err, owner] = results?.[i] ?? [new Error('no reply'), null];
            if (err) c.reject(err);
            // null: the key was absent and is ours now. Our own id: the provider's redelivery.
            else c.resolve(owner === null || owner === c.eventId ? undefined : String(owner));
          });
        },
        (err: unknown) => {
          for (const c of claims) c.reject(err);
        },
      );
    }
  };

  return {
    claim(tenantId, sourceId, bodySha256, eventId) {
      return new Promise((resolve, reject) => {
        const key = keys.dedup(tenantId, `body ${sourceId} ${bodySha256}`);
        const list = queued.get(tenantId);
        const p = { key, eventId, resolve, reject };
        if (list) list.push(p);
        else queued.set(tenantId, [p]);
        if (!scheduled) {
          scheduled = true;
          setImmediate(flush);
        }
      });
    },
  };
}

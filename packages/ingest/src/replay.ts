import { hash } from 'node:crypto';
import { defineCommands, type Keys, type RedisClient } from '@spillway/shared';

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
  /**
   * Claims `bodySha256` (hex) for `eventId`; resolves with the owner's fingerprint (16 hex: the
   * first 8 bytes of sha256(owner id), the id dedup's fingerprint) when another id owns it.
   */
  claim(tenantId: string, sourceId: string, bodySha256: string, eventId: string): Promise<string | undefined>;
}

/** What the guard needs of a Redis client: its Lua script is loaded onto it (`body-claim-1.lua`). */
export type ReplayRedis = RedisClient;

interface ClaimCommands {
  bodyClaim(base: string, ...args: (string | number)[]): Promise<(string | number)[]>;
}

export interface ReplayGuardOptions {
  /** The clock that picks the slot (tests move it). Default `Date.now`. */
  now?: () => number;
  /** Target claims per bucket (16 bytes each). Default 128: ~2 KiB strings, searched per claim. */
  perBucket?: number;
  /** Window-mask words per claim for a new slot (0: no mask). Default CLAIM_MASK_WORDS. */
  maskWords?: number;
}

/** Target claims per bucket: 128 × 16 B ≈ 2 KiB, the size of an id dedup bucket (256 × 8 B). */
export const CLAIMS_PER_BUCKET = 128;
/**
 * Window-mask words per claim of the slot before, for a new slot, as the id dedup's (docs/storage.md,
 * "Window masks"): a lookup reads a slot's bucket only when the mask has the slot's bit.
 */
export const CLAIM_MASK_WORDS = 8;

/**
 * The slots of a window, as the id dedup's (router records/fingerprints.ts `dedupSlots`): about 24
 * per window (an hour for 24 h, at least a minute), so a claim is remembered for the window and at
 * most one slot longer.
 */
export function claimSlots(windowMs: number, now: number): { slot: number; back: number; ttlMs: number } {
  const slotMs = Math.min(3_600_000, Math.max(60_000, Math.ceil(windowMs / 24)));
  const back = Math.ceil(windowMs / slotMs);
  return { slot: Math.floor(now / slotMs), back, ttlMs: (back + 1) * slotMs };
}

/**
 * One claim's arguments: the 8-byte fingerprint of (source, body hash) with 32 other bits of the
 * same digest for its bucket, and the 8-byte fingerprint of the id that claims it.
 */
export function claimArgs(sourceId: string, bodySha256: string, eventId: string): [string, string, number] {
  // One-shot hash(): a createHash object per digest cost about twice as much on the request path.
  const b = hash('sha256', `${sourceId}\n${bodySha256}`, 'buffer');
  const o = hash('sha256', eventId, 'hex').slice(0, 16);
  return [b.toString('hex', 0, 8), o, b.readUInt32BE(8)];
}

interface Pending {
  args: [string, string, number];
  resolve(owner: string | undefined): void;
  reject(err: unknown): void;
}

/**
 * The guard on Redis: claims are 16-byte entries in the tenant's slot buckets (docs/storage.md,
 * "Body claims": ~20 B per claim instead of a ~130 B key per body), checked and inserted by one
 * `body-claim-1.lua` call per tenant per event-loop turn (one round trip, like the intake's group
 * commit; atomic, so two ingest processes claiming one body at once cannot both own it; one
 * tenant's keys share a hash slot, so a call never spans Cluster slots). Every key written expires
 * a slot after the window.
 */
export function createRedisReplayGuard(
  redis: ReplayRedis,
  keys: Keys,
  windowMs: number,
  opts: ReplayGuardOptions = {},
): ReplayGuard {
  const r = defineCommands<ClaimCommands>(redis, new URL('./commands/', import.meta.url), ['body-claim-1']);
  const now = opts.now ?? Date.now;
  const per = opts.perBucket ?? CLAIMS_PER_BUCKET;
  const maskWords = opts.maskWords ?? CLAIM_MASK_WORDS;
  let queued = new Map<string, Pending[]>();
  let scheduled = false;

  const flush = () => {
    scheduled = false;
    const batch = queued;
    queued = new Map();
    const { slot, back, ttlMs } = claimSlots(windowMs, now());
    for (const [tenantId, claims] of batch) {
      const argv: (string | number)[] = [ttlMs, slot, back, per, maskWords];
      for (const c of claims) argv.push(...c.args);
      r.bodyClaim(keys.bodyClaim(tenantId), ...argv).then(
        (owners) => {
          claims.forEach((c, i) => {
            const o = owners[i];
            if (o === undefined) c.reject(new Error('body-claim: no reply'));
            // 0: claimed now, or already ours (the provider's redelivery).
            else c.resolve(o === 0 ? undefined : String(o));
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
        const p = { args: claimArgs(sourceId, bodySha256, eventId), resolve, reject };
        const list = queued.get(tenantId);
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

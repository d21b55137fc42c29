import { hash } from 'node:crypto';

/**
 * Fingerprints of event ids, the compact form in which Redis remembers them (docs/storage.md):
 * the dedup window keeps 8 bytes per id, the event-id index 2 bytes plus the minute. Both are
 * stored in buckets chosen by 32 other bits of the same hash, so the bits of the bucket number
 * add to the fingerprint's.
 */
export interface Fingerprint {
  /** 8 bytes, hex: what dedup compares. */
  dedup: string;
  /** 2 bytes, hex: what the event-id index keeps (a lookup checks the record it points to). */
  index: string;
  /** Unsigned 32-bit: which bucket of a slot's epoch the id goes to. */
  bucket: number;
}

/**
 * SHA-256 of the id (UTF-8): bytes 0–7 are `dedup`, 8–11 `bucket`, 12–13 `index`. One-shot `hash()`
 * to hex: a `createHash` object per id cost ~2.5 µs on the worker's hot path, this ~0.2 µs.
 */
export function fingerprint(eventId: string): Fingerprint {
  const h = hash('sha256', eventId, 'hex');
  return { dedup: h.slice(0, 16), index: h.slice(24, 28), bucket: Number.parseInt(h.slice(16, 24), 16) };
}

/** Target entries per dedup bucket (8 bytes each: ~2 KiB strings, searched per reserve). */
export const DEDUP_PER_BUCKET = 256;
/**
 * Window-mask words per entry of the slot before, for a new dedup slot (docs/storage.md, "Window
 * masks"): a table of 32-bit words, one bit per slot, two words per id; at 8 words (10 with the
 * headroom a new table gets) a lookup reads a slot's bucket for an id that is not there with odds
 * of ~3 % instead of always, for ~1.6 B per id. Body claims use the same.
 */
export const MASK_WORDS = 8;
/** Target entries per event-id index bucket (3 bytes each: ~1.5 KiB strings, read only by lookups). */
export const INDEX_PER_BUCKET = 512;
/** The event-id index's slots are hours (its entries carry the minute of the hour). */
export const INDEX_SLOT_MS = 3_600_000;

/**
 * Dedup slots: about 24 per window (an hour for the default 24 h, at least a minute), so a reserve
 * searches ~25 slots whatever the window, and an id is remembered for the window and at most one
 * slot longer.
 */
export function dedupSlots(
  windowMs: number,
  now = Date.now(),
): { slot: number; back: number; ttlMs: number } {
  const slotMs = Math.min(3_600_000, Math.max(60_000, Math.ceil(windowMs / 24)));
  const back = Math.ceil(windowMs / slotMs);
  return { slot: Math.floor(now / slotMs), back, ttlMs: (back + 1) * slotMs };
}

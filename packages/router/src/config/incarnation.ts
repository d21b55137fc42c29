/**
 * Id reuse (docs/architecture.md, "Id reuse"): a tenant or endpoint deleted and created again under
 * the same id is another owner. Its tasks are told apart by the gen they carry (Endpoint.gen,
 * worker/fanout.ts `staleTask`); events and history by time: nothing from before an incarnation
 * was created is its own.
 */

/**
 * How far before its `createdAt` an incarnation is taken to start. `createdAt` is the admin's
 * clock and an event's `receivedAt` the accepting process's: an event sent right after its
 * tenant was created on another host must not look older than the tenant. The cost: what the
 * previous owner of the id did in its last second is taken for the new one's.
 */
export const INCARNATION_SKEW_MS = 1000;

/** When the incarnation of a tenant or endpoint began (ms), for telling its events and history from a previous owner's. */
export function bornAt(x: { createdAt: string }): number {
  // Asked once per event at fan-out, of the same (frozen, cached) tenant record: parsed once.
  let t = born.get(x);
  if (t === undefined) {
    const ms = Date.parse(x.createdAt);
    t = Number.isFinite(ms) ? ms - INCARNATION_SKEW_MS : 0;
    if (Object.isFrozen(x)) born.set(x, t);
  }
  return t;
}

/** bornAt of frozen records (their createdAt cannot change under the cache). */
const born = new WeakMap<object, number>();

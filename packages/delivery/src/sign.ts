import { createHmac, createSecretKey, type KeyObject } from 'node:crypto';
import { type Endpoint, errors, generateWhsec, parseWhsec } from '@spillway/shared';

/**
 * Standard Webhooks signing (https://www.standardwebhooks.com): the signed content is
 * `<webhook-id>.<webhook-timestamp>.<body>`, the key is the base64-decoded part of `whsec_...`, and
 * `webhook-signature` is a space-separated list of `v1,<base64 HMAC-SHA256>` so that during a
 * rotation the receiver accepts whichever secret it already knows.
 */

/** `whsec_` + base64 of 32 random bytes (the spec asks for 24 to 64). */
export function generateSecret(): string {
  return generateWhsec(32);
}

/**
 * Decoded signing keys by secret: every delivery signs, and decoding the `whsec_` string each time
 * cost more than the HMAC of a small body. Bounded: past KEY_CACHE_MAX secrets the cache starts over.
 */
const keys = new Map<string, KeyObject>();
const KEY_CACHE_MAX = 10_000;

/** The admin API stores only `whsec_` secrets (shared `parseWhsec`); anything else is a bug upstream. */
function secretKey(secret: string): KeyObject {
  let key = keys.get(secret);
  if (key) return key;
  const raw = parseWhsec(secret);
  if (!raw)
    throw errors.config('endpoint secret is not whsec_ + base64 (the admin API refuses such secrets)');
  key = createSecretKey(raw);
  if (keys.size >= KEY_CACHE_MAX) keys.clear();
  keys.set(secret, key);
  return key;
}

/** The `webhook-signature` header value: one `v1,<b64>` per secret, space-separated. */
export function signPayload(
  secrets: readonly string[],
  msgId: string,
  timestampSec: number,
  body: Buffer,
): string {
  const head = `${msgId}.${timestampSec}.`;
  let out = '';
  for (const s of secrets) {
    const mac = createHmac('sha256', secretKey(s)).update(head).update(body).digest('base64');
    out = out === '' ? `v1,${mac}` : `${out} v1,${mac}`;
  }
  return out;
}

/** The endpoint's current secret first, then every previous secret whose overlap has not ended. */
export function signingSecrets(
  endpoint: Pick<Endpoint, 'secret' | 'previousSecrets'>,
  nowMs: number = Date.now(),
): string[] {
  const out = [endpoint.secret];
  for (const p of endpoint.previousSecrets ?? []) {
    if (Date.parse(p.expiresAt) > nowMs && !out.includes(p.secret)) out.push(p.secret);
  }
  return out;
}

/**
 * A secret rotation: the new secret signs from now on and the old one keeps signing (both
 * signatures sent) for `overlapMs`, so receivers can switch without dropping a delivery. Expired
 * previous secrets are pruned. The admin API stores the returned fields on the endpoint.
 */
export function rotateSecret(
  endpoint: Pick<Endpoint, 'secret' | 'previousSecrets'>,
  overlapMs: number,
  newSecret: string = generateSecret(),
  nowMs: number = Date.now(),
): { secret: string; previousSecrets: { secret: string; expiresAt: string }[] } {
  const kept = (endpoint.previousSecrets ?? []).filter((p) => Date.parse(p.expiresAt) > nowMs);
  return {
    secret: newSecret,
    previousSecrets: [
      { secret: endpoint.secret, expiresAt: new Date(nowMs + overlapMs).toISOString() },
      ...kept,
    ],
  };
}

import { randomBytes } from 'node:crypto';

/**
 * Standard Webhooks secrets (https://www.standardwebhooks.com): `whsec_` followed by the base64 of
 * the HMAC key. One rule, here, for everything that reads one (docs/contract-changes.md):
 * - decoding (`parseWhsec`): the prefix is required, then standard base64 (alphabet, at most two
 *   `=`), non-empty. Delivery signs with it, the ingest verifier of `standard` sources verifies
 *   with it, and the io_uring addon's C verifier (native/src/core/verify.c) applies the same
 *   rule (a secret without the prefix makes no key there either);
 * - setting one (`whsecProblem`): the same, with a key of at least WHSEC_MIN_KEY_BYTES. The admin
 *   API (a source's secret, an endpoint's secret, its JSON schema via WHSEC_SCHEMA_PATTERN) and
 *   SPILLWAY_NOTIFY_SECRET all use it, so what one accepts every other accepts.
 */
export const WHSEC_PREFIX = 'whsec_';

/**
 * The least key a secret may be set with: 16 bytes (128 bits). Secrets Spillway generates have 32.
 * (The admin API took 16 for a source's secret and 24 for an endpoint's; 16 keeps every secret it
 * ever stored valid.)
 */
export const WHSEC_MIN_KEY_BYTES = 16;

/** JSON-schema pattern of `whsecProblem`'s form: 22 base64 characters carry 16 bytes. */
export const WHSEC_SCHEMA_PATTERN = `^whsec_[A-Za-z0-9+/]{${Math.ceil((WHSEC_MIN_KEY_BYTES * 8) / 6)},}={0,2}$`;

const BASE64 = /^[A-Za-z0-9+/]+={0,2}$/;

/** The HMAC key of a `whsec_...` secret; undefined when the prefix or the base64 is missing or malformed. */
export function parseWhsec(secret: string): Buffer | undefined {
  if (!secret.startsWith(WHSEC_PREFIX)) return undefined;
  const b64 = secret.slice(WHSEC_PREFIX.length);
  if (!BASE64.test(b64)) return undefined;
  const key = Buffer.from(b64, 'base64');
  return key.length > 0 ? key : undefined;
}

/**
 * Why `secret` cannot be set as a Standard Webhooks secret (`what` names it in the message), or
 * undefined when it can: `whsec_` + base64 of at least WHSEC_MIN_KEY_BYTES bytes.
 */
export function whsecProblem(secret: string, what: string): string | undefined {
  const key = parseWhsec(secret);
  if (key && key.length >= WHSEC_MIN_KEY_BYTES) return undefined;
  return `${what} must be whsec_ + base64 of at least ${WHSEC_MIN_KEY_BYTES} bytes`;
}

/** `whsec_` + base64 of `bytes` random bytes (the spec asks for 24 to 64). */
export function generateWhsec(bytes = 32): string {
  return WHSEC_PREFIX + randomBytes(bytes).toString('base64');
}

import { randomBytes } from 'node:crypto';

/**
 * Standard Webhooks secrets (https://www.standardwebhooks.com): `whsec_` followed by the base64 of
 * the HMAC key. One rule for the admin API when a secret is set, delivery when it signs and ingest
 * when it verifies (packages/ingest/src/verify/standard.ts is moving onto it): the prefix is
 * required, so a secret the admin API accepted is decoded the same way everywhere
 * (docs/contract-changes.md).
 */
export const WHSEC_PREFIX = 'whsec_';

/** The HMAC key of a `whsec_...` secret; undefined when the prefix or the base64 is missing or malformed. */
export function parseWhsec(secret: string): Buffer | undefined {
  if (!secret.startsWith(WHSEC_PREFIX)) return undefined;
  const b64 = secret.slice(WHSEC_PREFIX.length);
  if (!/^[A-Za-z0-9+/]+={0,2}$/.test(b64)) return undefined;
  const key = Buffer.from(b64, 'base64');
  return key.length > 0 ? key : undefined;
}

/** `whsec_` + base64 of `bytes` random bytes (the spec asks for 24 to 64). */
export function generateWhsec(bytes = 32): string {
  return WHSEC_PREFIX + randomBytes(bytes).toString('base64');
}

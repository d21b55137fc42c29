import type { PreviousSecret } from './types.ts';

/**
 * Secret rotation with an overlap, one rule for endpoints (delivery signs with every live secret)
 * and sources (ingest accepts a signature made with any live secret).
 */
export interface SecretHolder {
  secret: string;
  previousSecrets?: PreviousSecret[];
}

/** The current secret first, then every previous secret whose overlap has not ended at `nowMs`. */
export function liveSecrets(holder: SecretHolder, nowMs: number): string[] {
  const out = [holder.secret];
  for (const p of holder.previousSecrets ?? []) {
    if (Date.parse(p.expiresAt) > nowMs && !out.includes(p.secret)) out.push(p.secret);
  }
  return out;
}

/**
 * `newSecret` becomes the secret; the replaced one stays live for `overlapMs`. Previous secrets
 * whose overlap has ended are pruned. `overlapMs` 0 means "only the new secret from now": every
 * previous secret is dropped (with `newSecret` equal to the current one, that ends an overlap early).
 */
export function rotatedSecrets(
  holder: SecretHolder,
  overlapMs: number,
  newSecret: string,
  nowMs: number,
): { secret: string; previousSecrets: PreviousSecret[] } {
  if (overlapMs <= 0) return { secret: newSecret, previousSecrets: [] };
  const kept = (holder.previousSecrets ?? []).filter(
    (p) => Date.parse(p.expiresAt) > nowMs && p.secret !== newSecret,
  );
  return {
    secret: newSecret,
    previousSecrets: [
      { secret: holder.secret, expiresAt: new Date(nowMs + overlapMs).toISOString() },
      ...kept,
    ].filter((p) => p.secret !== newSecret),
  };
}

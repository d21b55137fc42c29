import { liveSecrets, type Source } from '@spillway/shared';
import { type Prepared, refuse } from './common.ts';
import { prepareGithub } from './github.ts';
import { prepareShopify } from './shopify.ts';
import { prepareStandard } from './standard.ts';
import { prepareStripe } from './stripe.ts';

/**
 * Signature verification per source kind (docs/ingest.md). Each kind is split in two steps so
 * the pipeline can refuse cheaply: `prepare` reads only the headers (signature present and well
 * formed, timestamp inside the tolerance) before any body byte is read, and the returned Verifier
 * hashes the body chunk by chunk as it streams in, then decides once the last byte is in.
 */

export function prepareVerifier(
  source: Source,
  headers: Record<string, string>,
  nowMs: number,
  // The source's secret, then each previous one whose overlap has not ended: a rotation through the
  // admin API keeps the old secret verifying until its expiresAt, so the provider can be switched
  // over without a refused delivery. (Passed in by a caller that needs them too.)
  secrets: readonly string[] = liveSecrets(source, nowMs),
): Prepared {
  switch (source.kind) {
    case 'github':
      return prepareGithub(secrets, headers);
    case 'stripe':
      return prepareStripe(secrets, headers, nowMs);
    case 'shopify':
      return prepareShopify(secrets, headers);
    case 'standard':
      return prepareStandard(secrets, headers, nowMs);
    default:
      return refuse(
        401,
        'bad_signature',
        `source kind ${String((source as Source).kind)} cannot be verified`,
      );
  }
}

export type { Prepared, Refusal, Verified, Verifier, VerifyFailure } from './common.ts';
export { TIMESTAMP_TOLERANCE_S } from './common.ts';

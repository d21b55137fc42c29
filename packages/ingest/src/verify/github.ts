import { headerEventVerifier, type Prepared, refuse } from './common.ts';

const HEADER = /^sha256=([0-9a-fA-F]{64})$/;

/**
 * GitHub: `X-Hub-Signature-256: sha256=<hex HMAC-SHA256(secret, body)>`; type and id from headers.
 * `secrets`: the source's secret, then the previous ones still inside their overlap.
 */
export function prepareGithub(secrets: readonly string[], headers: Record<string, string>): Prepared {
  const m = HEADER.exec(headers['x-hub-signature-256']?.trim() ?? '');
  if (!m) return refuse(401, 'missing_signature', 'missing or malformed X-Hub-Signature-256');
  return headerEventVerifier(secrets, Buffer.from(m[1]!, 'hex'), headers, {
    signature: 'X-Hub-Signature-256',
    id: 'X-GitHub-Delivery',
    type: 'X-GitHub-Event',
  });
}

import { hmacSha256, identify, type Prepared, refuse, safeEqual } from './common.ts';

const HEADER = /^sha256=([0-9a-fA-F]{64})$/;

/** GitHub: `X-Hub-Signature-256: sha256=<hex HMAC-SHA256(secret, body)>`; type and id from headers. */
export function prepareGithub(secret: string, headers: Record<string, string>): Prepared {
  const m = HEADER.exec(headers['x-hub-signature-256']?.trim() ?? '');
  if (!m) return refuse(401, 'missing_signature', 'missing or malformed X-Hub-Signature-256');
  const given = Buffer.from(m[1]!, 'hex');
  const mac = hmacSha256(secret);
  return {
    ok: true,
    verifier: {
      update: (chunk) => void mac.update(chunk),
      finish() {
        if (!safeEqual(mac.digest(), given))
          return refuse(401, 'bad_signature', 'X-Hub-Signature-256 does not match the body');
        return identify(headers['x-github-delivery'], headers['x-github-event'], {
          id: 'X-GitHub-Delivery',
          type: 'X-GitHub-Event',
        });
      },
    },
  };
}

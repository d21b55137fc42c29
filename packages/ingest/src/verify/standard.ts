import { parseWhsec } from '@spillway/shared';
import { hmacSha256, jsonEventVerifier, refuse, type TimedPrepare, timestampFresh } from './common.ts';

/**
 * Standard Webhooks (standardwebhooks.com): `webhook-id`, `webhook-timestamp`, and
 * `webhook-signature: v1,<base64> [v1,<base64> ...]` (space-separated, several during a key
 * rotation), HMAC-SHA256 over `${id}.${timestamp}.${body}`. The key is the base64-decoded part after
 * `whsec_`, decoded by the shared rule (`parseWhsec`, the admin API's and the signer's too): a secret
 * without the prefix, or whose base64 is malformed, gives no key, so nothing verifies against it.
 * `secrets`: the source's secret, then the previous ones still inside their overlap.
 */
export const prepareStandard: TimedPrepare = (secrets, headers, nowMs) => {
  const id = headers['webhook-id'];
  const ts = headers['webhook-timestamp'];
  const sig = headers['webhook-signature'];
  if (!id || !ts || !sig)
    return refuse(401, 'missing_signature', 'missing webhook-id, webhook-timestamp or webhook-signature');
  if (!/^\d{1,12}$/.test(ts)) return refuse(401, 'timestamp', 'malformed webhook-timestamp');
  if (!timestampFresh(Number(ts), nowMs))
    return refuse(401, 'timestamp', 'webhook-timestamp outside the 300 s tolerance');
  const given: Buffer[] = [];
  for (const entry of sig.split(' ')) {
    const comma = entry.indexOf(',');
    if (comma < 0 || entry.slice(0, comma) !== 'v1') continue;
    const b = Buffer.from(entry.slice(comma + 1), 'base64');
    if (b.length === 32) given.push(b);
  }
  if (given.length === 0) return refuse(401, 'missing_signature', 'webhook-signature has no v1 signature');
  const keys = secrets.map(parseWhsec).filter((k): k is Buffer => k !== undefined);
  if (keys.length === 0) return refuse(401, 'bad_signature', 'the source has no usable whsec_ secret');
  return jsonEventVerifier(
    hmacSha256(keys, `${id}.${ts}.`),
    given,
    {
      noMatch: 'no webhook-signature matches the body',
      notObject: 'a Standard Webhooks body must be a JSON object',
      id: 'webhook-id',
    },
    () => id,
  );
};

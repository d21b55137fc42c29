import { hmacSha256, jsonEventVerifier, refuse, type TimedPrepare, timestampFresh } from './common.ts';

const HEX64 = /^[0-9a-fA-F]{64}$/;

/**
 * Stripe: `Stripe-Signature: t=<unix>,v1=<hex>[,v1=<hex>...]`, HMAC-SHA256(secret, `${t}.${body}`)
 * with the `whsec_...` string itself as the key. Several v1 entries appear while a secret is being
 * rolled on Stripe's side; any may match, under any of `secrets` (the source's secret, then the
 * previous ones still inside their overlap). Other schemes (v0) are ignored, as Stripe's own
 * libraries do.
 */
export const prepareStripe: TimedPrepare = (secrets, headers, nowMs) => {
  const header = headers['stripe-signature'];
  if (!header) return refuse(401, 'missing_signature', 'missing Stripe-Signature');
  let t: string | undefined;
  const v1: Buffer[] = [];
  for (const part of header.split(',')) {
    const eq = part.indexOf('=');
    if (eq < 0) continue;
    const k = part.slice(0, eq).trim();
    const v = part.slice(eq + 1).trim();
    if (k === 't') t = v;
    else if (k === 'v1' && HEX64.test(v)) v1.push(Buffer.from(v, 'hex'));
  }
  if (t === undefined || !/^\d{1,12}$/.test(t) || v1.length === 0) {
    return refuse(401, 'missing_signature', 'malformed Stripe-Signature (needs t= and v1=)');
  }
  // Decided before the body: a stale timestamp is a replay whatever the body says.
  if (!timestampFresh(Number(t), nowMs))
    return refuse(401, 'timestamp', 'Stripe-Signature timestamp outside the 300 s tolerance');
  return jsonEventVerifier(
    hmacSha256(secrets, `${t}.`),
    v1,
    {
      noMatch: 'no Stripe-Signature v1 matches the body',
      notObject: 'a Stripe event body must be a JSON object',
      id: 'body id',
    },
    (json) => json.id,
  );
};

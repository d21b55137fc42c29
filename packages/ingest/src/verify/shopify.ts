import { hmacSha256, identify, type Prepared, refuse, safeEqual } from './common.ts';

const BASE64 = /^[A-Za-z0-9+/]{43}=$/;

/** Shopify: `X-Shopify-Hmac-Sha256: <base64 HMAC-SHA256(secret, body)>`; topic and webhook id from headers. */
export function prepareShopify(secret: string, headers: Record<string, string>): Prepared {
  const sig = headers['x-shopify-hmac-sha256']?.trim() ?? '';
  if (!BASE64.test(sig))
    return refuse(401, 'missing_signature', 'missing or malformed X-Shopify-Hmac-Sha256');
  const given = Buffer.from(sig, 'base64');
  const mac = hmacSha256(secret);
  return {
    ok: true,
    verifier: {
      update: (chunk) => void mac.update(chunk),
      finish() {
        if (!safeEqual(mac.digest(), given))
          return refuse(401, 'bad_signature', 'X-Shopify-Hmac-Sha256 does not match the body');
        return identify(headers['x-shopify-webhook-id'], headers['x-shopify-topic'], {
          id: 'X-Shopify-Webhook-Id',
          type: 'X-Shopify-Topic',
        });
      },
    },
  };
}

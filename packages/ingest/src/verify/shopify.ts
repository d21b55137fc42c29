import { headerEventVerifier, type Prepared, refuse } from './common.ts';

const BASE64 = /^[A-Za-z0-9+/]{43}=$/;

/**
 * Shopify: `X-Shopify-Hmac-Sha256: <base64 HMAC-SHA256(secret, body)>`; topic and webhook id from
 * headers. `secrets`: the source's secret, then the previous ones still inside their overlap.
 */
export function prepareShopify(secrets: readonly string[], headers: Record<string, string>): Prepared {
  const sig = headers['x-shopify-hmac-sha256']?.trim() ?? '';
  if (!BASE64.test(sig))
    return refuse(401, 'missing_signature', 'missing or malformed X-Shopify-Hmac-Sha256');
  return headerEventVerifier(secrets, Buffer.from(sig, 'base64'), headers, {
    signature: 'X-Shopify-Hmac-Sha256',
    id: 'X-Shopify-Webhook-Id',
    type: 'X-Shopify-Topic',
  });
}

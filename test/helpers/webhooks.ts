import type { IncomingHttpHeaders } from 'node:http';
import { Webhook } from 'standardwebhooks';
import { expect } from 'vitest';

/**
 * A delivery a receiver got is signed per Standard Webhooks with `secret` over the exact bytes
 * (the reference library's verify throws otherwise).
 */
export function expectSignedWith(secret: string, got: { body: Buffer; headers: IncomingHttpHeaders }): void {
  const wh = new Webhook(secret);
  expect(() =>
    wh.verify(got.body, {
      'webhook-id': String(got.headers['webhook-id']),
      'webhook-timestamp': String(got.headers['webhook-timestamp']),
      'webhook-signature': String(got.headers['webhook-signature']),
    }),
  ).not.toThrow();
}

import { createHmac, randomBytes } from 'node:crypto';
import { Webhook } from 'standardwebhooks';
import { describe, expect, it } from 'vitest';
import {
  generateSecret,
  MAX_RETRY_AFTER_MS,
  nextRetryDelay,
  parseRetryAfter,
  rotateSecret,
  signingSecrets,
  signPayload,
} from '../src/index.ts';
import { hmac, hmacs, signingImplementation } from '../src/sign.ts';

describe('signing (Standard Webhooks)', () => {
  it('generates whsec_ secrets of at least 24 random bytes', () => {
    const a = generateSecret();
    const b = generateSecret();
    expect(a).toMatch(/^whsec_[A-Za-z0-9+/]+=*$/);
    expect(Buffer.from(a.slice(6), 'base64').length).toBeGreaterThanOrEqual(24);
    expect(a).not.toBe(b);
  });

  it('signatures verify with the standardwebhooks library', () => {
    const secret = generateSecret();
    const body = Buffer.from('{"type":"order.created","n":1}');
    const ts = Math.floor(Date.now() / 1000);
    const sig = signPayload([secret], 'msg_1', ts, body);
    expect(sig).toMatch(/^v1,[A-Za-z0-9+/]+=*$/);
    const headers = { 'webhook-id': 'msg_1', 'webhook-timestamp': String(ts), 'webhook-signature': sig };
    expect(new Webhook(secret).verify(body, headers)).toEqual({ type: 'order.created', n: 1 });
    // Same bytes as the library's own signer.
    expect(sig).toBe(new Webhook(secret).sign('msg_1', new Date(ts * 1000), body));
    // A different body or secret does not verify.
    expect(() => new Webhook(secret).verify(Buffer.from('{"n":2}'), headers)).toThrow();
    expect(() => new Webhook(generateSecret()).verify(body, headers)).toThrow();
  });

  it('signs with the native addon (`pnpm run build` builds it)', () => {
    expect(hmacs.native, 'packages/delivery/native is not built').toBeDefined();
    expect(hmac.name).toBe('native');
    expect(signingImplementation).toBe('native');
  });

  for (const impl of [hmacs.native, hmacs.node].filter((h) => h !== undefined))
    it(`${impl.name}: matches the library's signer for keys of 24 to 64 bytes, bodies of 0 B to 200 KiB and non-ASCII ids`, () => {
      const ts = Math.floor(Date.now() / 1000);
      for (const keyBytes of [24, 32, 63, 64])
        for (const size of [0, 1, 55, 56, 64, 255, 16 * 1024, 16 * 1024 + 1, 200 * 1024]) {
          const secret = `whsec_${randomBytes(keyBytes).toString('base64')}`;
          // Text: the library signs a string (UTF-8), so arbitrary bytes would not round-trip.
          const body = Buffer.from(randomBytes(size).toString('base64').slice(0, size));
          // A head longer than the addon's 512-byte stack buffer takes its heap path.
          for (const id of ['msg_2', 'msg_é✓', `msg_${'x'.repeat(600)}`]) {
            const sig = signPayload([secret], id, ts, body, impl);
            expect(sig, `${keyBytes} B key, ${size} B body, id ${id.slice(0, 12)}`).toBe(
              new Webhook(secret).sign(id, new Date(ts * 1000), body),
            );
          }
        }
    });

  it('heads around the native stack buffer (512 bytes) sign right, multi-byte characters at its edge too', () => {
    const ts = Math.floor(Date.now() / 1000);
    const secret = generateSecret();
    const body = Buffer.from('{"edge":true}');
    for (const impl of [hmacs.native, hmacs.node].filter((h) => h !== undefined))
      for (let n = 480; n < 520; n++)
        for (const tail of ['', 'é', '✓', '😀']) {
          const id = 'x'.repeat(n) + tail;
          expect(signPayload([secret], id, ts, body, impl), `${impl.name} ${n} + ${tail}`).toBe(
            new Webhook(secret).sign(id, new Date(ts * 1000), body),
          );
        }
  });

  it('a key longer than a SHA-256 block is hashed first (RFC 2104), in both implementations', () => {
    const raw = randomBytes(100);
    const secret = `whsec_${raw.toString('base64')}`;
    const body = Buffer.from('{"long":"key"}');
    const want = createHmac('sha256', raw).update('msg_k.1.').update(body).digest('base64');
    for (const impl of [hmacs.native, hmacs.node].filter((h) => h !== undefined))
      expect(signPayload([secret], 'msg_k', 1, body, impl), impl.name).toBe(`v1,${want}`);
  });

  it('during a rotation both secrets sign and receivers on either verify; after the overlap only the new one', () => {
    const old = generateSecret();
    const now = Date.now();
    const rotated = rotateSecret({ secret: old }, 60_000, undefined, now);
    expect(rotated.secret).not.toBe(old);
    const during = signingSecrets(rotated, now + 1_000);
    expect(during).toEqual([rotated.secret, old]);
    const body = Buffer.from('{"x":true}');
    const ts = Math.floor(now / 1000);
    const sig = signPayload(during, 'msg_rot', ts, body);
    expect(sig.split(' ')).toHaveLength(2);
    const headers = { 'webhook-id': 'msg_rot', 'webhook-timestamp': String(ts), 'webhook-signature': sig };
    expect(new Webhook(old).verify(body, headers)).toEqual({ x: true });
    expect(new Webhook(rotated.secret).verify(body, headers)).toEqual({ x: true });
    // Overlap over: the old secret no longer signs, so an old-only receiver fails.
    const after = signingSecrets(rotated, now + 61_000);
    expect(after).toEqual([rotated.secret]);
    const sig2 = signPayload(after, 'msg_rot', ts, body);
    expect(() => new Webhook(old).verify(body, { ...headers, 'webhook-signature': sig2 })).toThrow();
  });
});

describe('nextRetryDelay', () => {
  const schedule = [100, 200, 400];

  it('follows the schedule with ±20 % jitter and returns undefined once it is exhausted', () => {
    expect(nextRetryDelay(schedule, 1, undefined, () => 0.5)).toBe(100);
    expect(nextRetryDelay(schedule, 2, undefined, () => 0)).toBe(160);
    expect(nextRetryDelay(schedule, 3, undefined, () => 0.999999)).toBe(480);
    expect(nextRetryDelay(schedule, 4)).toBeUndefined();
    expect(nextRetryDelay(schedule, 0)).toBeUndefined();
    for (let i = 0; i < 200; i++) {
      const d = nextRetryDelay(schedule, 2)!;
      expect(d).toBeGreaterThanOrEqual(160);
      expect(d).toBeLessThanOrEqual(240);
    }
  });

  it('honours a longer Retry-After, bounded by twice the scheduled delay and one hour', () => {
    expect(nextRetryDelay(schedule, 1, 150, () => 0.5)).toBe(150);
    expect(nextRetryDelay(schedule, 1, 50, () => 0.5)).toBe(100);
    expect(nextRetryDelay(schedule, 1, 10_000, () => 0.5)).toBe(200);
    expect(nextRetryDelay([7_200_000], 1, 10 * 3_600_000, () => 0.5)).toBe(MAX_RETRY_AFTER_MS);
    expect(nextRetryDelay(schedule, 4, 100)).toBeUndefined();
  });

  it('parses Retry-After seconds and HTTP dates', () => {
    expect(parseRetryAfter('3')).toBe(3000);
    const now = Date.parse('2030-01-01T00:00:00Z');
    expect(parseRetryAfter('Tue, 01 Jan 2030 00:00:10 GMT', now)).toBe(10_000);
    expect(parseRetryAfter('soon')).toBeUndefined();
    expect(parseRetryAfter(undefined)).toBeUndefined();
    expect(parseRetryAfter('999999999')).toBe(MAX_RETRY_AFTER_MS);
  });
});

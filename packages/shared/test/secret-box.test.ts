import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import {
  createSecretBox,
  liveSecrets,
  loadConfig,
  parseSecretKey,
  rotatedSecrets,
  secretBoxOf,
  secretKeyId,
} from '../src/index.ts';

const key = () => randomBytes(32);

describe('secret box (AES-256-GCM under SPILLWAY_SECRET_KEY)', () => {
  it('seals to enc:v1:<key id>:..., opens back, and never twice the same ciphertext', () => {
    const k = key();
    const box = createSecretBox(k);
    const a = box.seal('whsec_abc', 'endpoint:t:e');
    const b = box.seal('whsec_abc', 'endpoint:t:e');
    expect(a).toMatch(new RegExp(`^enc:v1:${secretKeyId(k)}:[A-Za-z0-9_-]+$`));
    expect(a).not.toBe(b);
    expect(a).not.toContain('abc');
    expect(box.open(a, 'endpoint:t:e')).toBe('whsec_abc');
    expect(box.state(a)).toBe('current');
  });

  it('a ciphertext opens only in its own record, and an altered one not at all', () => {
    const box = createSecretBox(key());
    const sealed = box.seal('s3cret', 'source:t:a');
    expect(() => box.open(sealed, 'source:t:b')).toThrow(/does not authenticate/);
    const flipped = sealed.slice(0, -2) + (sealed.at(-2) === 'A' ? 'B' : 'A') + sealed.at(-1);
    expect(() => box.open(flipped, 'source:t:a')).toThrow(/does not authenticate/);
  });

  it('opens values sealed under a previous key; seals only under the current one; plaintext passes', () => {
    const oldKey = key();
    const newKey = key();
    const sealedOld = createSecretBox(oldKey).seal('old-secret', 'ctx');
    const rotated = createSecretBox(newKey, [oldKey]);
    expect(rotated.keyIds).toEqual([secretKeyId(newKey), secretKeyId(oldKey)]);
    expect(rotated.open(sealedOld, 'ctx')).toBe('old-secret');
    expect(rotated.state(sealedOld)).toBe('previous');
    expect(rotated.state(rotated.seal('x', 'ctx'))).toBe('current');
    // Written before encryption existed: read as is.
    expect(rotated.open('gh-plain', 'ctx')).toBe('gh-plain');
    expect(rotated.state('gh-plain')).toBe('plaintext');
    // Without the old key, the error names the key id and both variables.
    expect(() => createSecretBox(newKey).open(sealedOld, 'ctx')).toThrow(
      new RegExp(`${secretKeyId(oldKey)}.*SPILLWAY_SECRET_KEY.*SPILLWAY_SECRET_KEY_PREVIOUS`),
    );
  });

  it('takes the key as hex, base64 or base64url; anything else is refused', () => {
    const k = key();
    expect(parseSecretKey(k.toString('hex'))).toEqual(k);
    expect(parseSecretKey(k.toString('base64'))).toEqual(k);
    expect(parseSecretKey(k.toString('base64url'))).toEqual(k);
    for (const bad of ['replace-me', randomBytes(31).toString('hex'), randomBytes(33).toString('base64'), ''])
      expect(parseSecretKey(bad)).toBeUndefined();
  });

  it('config: without SPILLWAY_SECRET_KEY secrets are stored as they are; a bad key names the variable without echoing it', () => {
    const plain = secretBoxOf(loadConfig({}));
    expect(plain.encrypted).toBe(false);
    expect(plain.box.seal('whsec_abc', 'endpoint:t:e')).toBe('whsec_abc');
    const sealed = createSecretBox(key()).seal('whsec_abc', 'endpoint:t:e');
    expect(() => plain.box.open(sealed, 'endpoint:t:e')).toThrow(/SPILLWAY_SECRET_KEY is not set/);
    const k = key();
    const prev = key();
    const { box, encrypted } = secretBoxOf(
      loadConfig({
        SPILLWAY_SECRET_KEY: k.toString('base64'),
        SPILLWAY_SECRET_KEY_PREVIOUS: `${prev.toString('hex')}, ${k.toString('hex')}`,
      }),
    );
    expect(encrypted).toBe(true);
    expect(box.keyId).toBe(secretKeyId(k));
    expect(box.keyIds).toEqual([secretKeyId(k), secretKeyId(prev)]);
    const short = randomBytes(16).toString('hex');
    for (const [name, value] of [
      ['SPILLWAY_SECRET_KEY', short],
      ['SPILLWAY_SECRET_KEY_PREVIOUS', `${k.toString('hex')},${short}`],
    ] as const) {
      let message = '';
      try {
        loadConfig({ [name]: value });
      } catch (err) {
        message = (err as Error).message;
      }
      expect(message).toMatch(new RegExp(`^${name}`));
      expect(message).not.toContain(short);
      expect(message).not.toContain('\n');
    }
  });
});

describe('secret rotation with an overlap', () => {
  it('the replaced secret stays live until expiresAt; expired ones are pruned; overlap 0 drops every previous one', () => {
    const now = Date.parse('2026-12-01T00:00:00Z');
    const r = rotatedSecrets({ secret: 'a' }, 60_000, 'b', now);
    expect(r).toEqual({
      secret: 'b',
      previousSecrets: [{ secret: 'a', expiresAt: '2026-12-01T00:01:00.000Z' }],
    });
    expect(liveSecrets(r, now + 59_000)).toEqual(['b', 'a']);
    expect(liveSecrets(r, now + 60_000)).toEqual(['b']);
    const c = rotatedSecrets(r, 30_000, 'c', now + 1000);
    expect(c.previousSecrets.map((p) => p.secret)).toEqual(['b', 'a']);
    // At +40 s, b (live until +31 s) is pruned, a (until +60 s) is kept.
    expect(rotatedSecrets(c, 30_000, 'd', now + 40_000).previousSecrets.map((p) => p.secret)).toEqual([
      'c',
      'a',
    ]);
    expect(rotatedSecrets(c, 0, 'd', now + 2000)).toEqual({ secret: 'd', previousSecrets: [] });
    // The same secret with overlap 0 ends the overlap early.
    expect(rotatedSecrets(c, 0, 'c', now + 2000)).toEqual({ secret: 'c', previousSecrets: [] });
    // Rotating back to a previous secret does not list it twice.
    expect(rotatedSecrets(r, 1000, 'a', now).previousSecrets.map((p) => p.secret)).toEqual(['b']);
  });
});

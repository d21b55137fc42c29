import {
  createHmac,
  createPrivateKey,
  createPublicKey,
  createSecretKey,
  generateKeyPairSync,
  type KeyObject,
  sign,
} from 'node:crypto';
import { createRequire } from 'node:module';
import {
  type Ed25519KeyPair,
  type Endpoint,
  errors,
  generateWhsec,
  liveSecrets,
  parseWhsec,
  rotatedSecrets,
} from '@spillway/shared';

/**
 * Standard Webhooks signing (https://www.standardwebhooks.com): the signed content is
 * `<webhook-id>.<webhook-timestamp>.<body>`, the key is the base64-decoded part of `whsec_...`, and
 * `webhook-signature` is a space-separated list of `v1,<base64 HMAC-SHA256>` so that during a
 * rotation the receiver accepts whichever secret it already knows.
 */

/** `whsec_` + base64 of 32 random bytes (the spec asks for 24 to 64). */
export function generateSecret(): string {
  return generateWhsec(32);
}

/**
 * The HMAC-SHA256 behind `v1`, over `<head><body>`, as base64. Two implementations: the signing
 * addon (native/src/sign.c: the key's inner and outer SHA-256 states computed once per key, so a
 * call hashes only the message; ~1 µs a delivery against ~5 µs for createHmac in a draining
 * worker, docs/benchmarks/profile.md), and node:crypto when the addon is not built. Both give the
 * same bytes; the tests check each against the standardwebhooks library.
 */
export interface Hmac {
  readonly name: 'native' | 'node:crypto';
  mac(secret: string, head: string, body: Buffer): string;
}

/** A cache of prepared keys by `whsec_` secret; past KEY_CACHE_MAX secrets it starts over. */
const KEY_CACHE_MAX = 10_000;
function keyCache<K>(prepare: (raw: Buffer) => K): (secret: string) => K {
  const keys = new Map<string, K>();
  return (secret) => {
    let key = keys.get(secret);
    if (key !== undefined) return key;
    const raw = parseWhsec(secret);
    if (!raw)
      throw errors.config('endpoint secret is not whsec_ + base64 (the admin API refuses such secrets)');
    key = prepare(raw);
    if (keys.size >= KEY_CACHE_MAX) keys.clear();
    keys.set(secret, key);
    return key;
  };
}

function nodeHmac(): Hmac {
  // Decoding the `whsec_` string each time cost more than the HMAC of a small body.
  const keyOf = keyCache((raw) => createSecretKey(raw));
  return {
    name: 'node:crypto',
    mac: (secret, head, body) =>
      createHmac('sha256', keyOf(secret)).update(head).update(body).digest('base64'),
  };
}

interface SignAddon {
  key(raw: Buffer): Buffer;
  mac(key: Buffer, head: string, body: Buffer): string;
}
const ADDON_PATH = '../native/build/Release/spillway_sign.node';

function nativeHmac(): Hmac | undefined {
  let addon: SignAddon;
  try {
    addon = createRequire(import.meta.url)(ADDON_PATH) as SignAddon;
  } catch {
    return undefined; // not built (`pnpm run build` builds it): node:crypto signs instead
  }
  const keyOf = keyCache((raw) => addon.key(raw));
  return { name: 'native', mac: (secret, head, body) => addon.mac(keyOf(secret), head, body) };
}

/** Every implementation this process has (the addon's only when it is built), for the tests. */
export const hmacs: { readonly native: Hmac | undefined; readonly node: Hmac } = {
  native: nativeHmac(),
  node: nodeHmac(),
};
/** The one the worker signs with. */
export const hmac: Hmac = hmacs.native ?? hmacs.node;
/** Which one that is, for the worker's start-up line: `native`, or `node:crypto` when the addon is not built. */
export const signingImplementation: Hmac['name'] = hmac.name;

/** The `webhook-signature` header value: one `v1,<b64>` per secret, space-separated. */
export function signPayload(
  secrets: readonly string[],
  msgId: string,
  timestampSec: number,
  body: Buffer,
  impl: Hmac = hmac,
): string {
  const head = `${msgId}.${timestampSec}.`;
  let out = '';
  for (const s of secrets) {
    const mac = impl.mac(s, head, body);
    out = out === '' ? `v1,${mac}` : `${out} v1,${mac}`;
  }
  return out;
}

/** The endpoint's current secret first, then every previous secret whose overlap has not ended. */
export function signingSecrets(
  endpoint: Pick<Endpoint, 'secret' | 'previousSecrets'>,
  nowMs: number = Date.now(),
): string[] {
  return liveSecrets(endpoint, nowMs);
}

/**
 * A secret rotation: the new secret signs from now on and the old one keeps signing (both
 * signatures sent) for `overlapMs`, so receivers can switch without dropping a delivery. Expired
 * previous secrets are pruned. The admin API stores the returned fields on the endpoint.
 */
export function rotateSecret(
  endpoint: Pick<Endpoint, 'secret' | 'previousSecrets'>,
  overlapMs: number,
  newSecret: string = generateSecret(),
  nowMs: number = Date.now(),
): { secret: string; previousSecrets: { secret: string; expiresAt: string }[] } {
  return rotatedSecrets(endpoint, overlapMs, newSecret, nowMs);
}

// --- Ed25519 (`v1a`) ---------------------------------------------------------------------------

/** Standard Webhooks prefixes of an asymmetric key pair: secret (private) key and public key. */
export const WHSK_PREFIX = 'whsk_';
export const WHPK_PREFIX = 'whpk_';
/** DER headers that turn a raw 32-byte Ed25519 seed or public key into PKCS#8 / SPKI. */
const PKCS8_ED25519 = Buffer.from('302e020100300506032b657004220420', 'hex');
const SPKI_ED25519 = Buffer.from('302a300506032b6570032100', 'hex');

function b64(prefix: string, text: string): Buffer | undefined {
  if (!text.startsWith(prefix)) return undefined;
  const rest = text.slice(prefix.length);
  if (!/^[A-Za-z0-9+/]+={0,2}$/.test(rest)) return undefined;
  return Buffer.from(rest, 'base64');
}

/**
 * The key pair of a `whsk_` private key: base64 of the 32-byte seed followed by the 32-byte public
 * key (the NaCl/libsodium layout), or of the seed alone. Undefined when it is neither, or when the
 * public half does not belong to the seed.
 */
export function parseEd25519PrivateKey(whsk: string): Ed25519KeyPair | undefined {
  const raw = b64(WHSK_PREFIX, whsk);
  if (!raw || (raw.length !== 32 && raw.length !== 64)) return undefined;
  const seed = raw.subarray(0, 32);
  const key = createPrivateKey({ key: Buffer.concat([PKCS8_ED25519, seed]), format: 'der', type: 'pkcs8' });
  const pub = createPublicKey(key).export({ format: 'der', type: 'spki' }).subarray(SPKI_ED25519.length);
  if (raw.length === 64 && !raw.subarray(32).equals(pub)) return undefined;
  return {
    privateKey: WHSK_PREFIX + Buffer.concat([seed, pub]).toString('base64'),
    publicKey: WHPK_PREFIX + pub.toString('base64'),
    createdAt: new Date().toISOString(),
  };
}

/** A fresh Ed25519 key pair in the Standard Webhooks serialisation. */
export function generateEd25519(): Ed25519KeyPair {
  const { privateKey } = generateKeyPairSync('ed25519');
  const seed = privateKey.export({ format: 'der', type: 'pkcs8' }).subarray(PKCS8_ED25519.length);
  return parseEd25519PrivateKey(WHSK_PREFIX + seed.toString('base64'))!;
}

/** The public key as PEM (SPKI), for receivers whose libraries want that instead of `whpk_`. */
export function ed25519PublicPem(whpk: string): string {
  const raw = b64(WHPK_PREFIX, whpk);
  if (raw?.length !== 32) throw errors.config('ed25519 public key is not whpk_ + base64 of 32 bytes');
  return createPublicKey({ key: Buffer.concat([SPKI_ED25519, raw]), format: 'der', type: 'spki' })
    .export({ format: 'pem', type: 'spki' })
    .toString();
}

/** Decoded private keys by `whsk_` string (decoding costs more than a small body's signature). */
const edKeys = new Map<string, KeyObject>();

/** The signing KeyObject of a stored `whsk_` key (the admin API stores only valid ones). */
export function ed25519SigningKey(whsk: string): KeyObject {
  let key = edKeys.get(whsk);
  if (key) return key;
  const raw = b64(WHSK_PREFIX, whsk);
  if (raw?.length !== 64) throw errors.config('ed25519 private key is not whsk_ + base64 of 64 bytes');
  key = createPrivateKey({
    key: Buffer.concat([PKCS8_ED25519, raw.subarray(0, 32)]),
    format: 'der',
    type: 'pkcs8',
  });
  if (edKeys.size >= KEY_CACHE_MAX) edKeys.clear();
  edKeys.set(whsk, key);
  return key;
}

/** `v1a,<base64 Ed25519 signature>` over `<msgId>.<timestamp>.<body>`. */
export function signEd25519(key: KeyObject, msgId: string, timestampSec: number, body: Buffer): string {
  const sig = sign(null, Buffer.concat([Buffer.from(`${msgId}.${timestampSec}.`), body]), key);
  return `v1a,${sig.toString('base64')}`;
}

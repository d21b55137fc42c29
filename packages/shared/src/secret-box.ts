import { createCipheriv, createDecipheriv, createHmac, randomBytes } from 'node:crypto';
import { errors } from './errors.ts';

/**
 * Encryption at rest of the secrets Spillway stores (endpoint signing secrets, source verification
 * secrets): AES-256-GCM with the key from SPILLWAY_SECRET_KEY. A sealed value is one string,
 *
 *   enc:v1:<key id>:<base64url(iv 12 bytes | ciphertext | tag 16 bytes)>
 *
 * The key id (8 hex characters, an HMAC of the key, so it says nothing about the key) names the
 * key that sealed it, so that during a key rotation a value sealed under a key listed in
 * SPILLWAY_SECRET_KEY_PREVIOUS still opens, and `spillway secrets reencrypt` can tell what is left
 * to move. The additional authenticated data is the record the secret belongs to
 * (`endpoint:<tenant>:<id>`, `source:<tenant>:<id>`): a ciphertext copied into another record does
 * not open there. A stored value without the `enc:` prefix is a secret written before encryption
 * existed; it opens as itself and is sealed the next time its record is written or re-encrypted.
 */
export interface SecretBox {
  /** Id of SPILLWAY_SECRET_KEY: what `seal` writes. */
  readonly keyId: string;
  /** Every key id `open` accepts: the current key first, then SPILLWAY_SECRET_KEY_PREVIOUS in order. */
  readonly keyIds: readonly string[];
  seal(plaintext: string, context: string): string;
  /** The plaintext; SPW_ERR_CONFIG naming the key id when no configured key opens it. */
  open(stored: string, context: string): string;
  /** `current` (sealed under SPILLWAY_SECRET_KEY), `previous` (another key) or `plaintext`. */
  state(stored: string): 'current' | 'previous' | 'plaintext';
}

const PREFIX = 'enc:v1:';
const IV_BYTES = 12;
const TAG_BYTES = 16;

/** True for a value in the sealed format (the admin API refuses secrets that look like one). */
export function isSealed(stored: string): boolean {
  return stored.startsWith('enc:');
}

/** The 8-hex-character id of a 32-byte key. */
export function secretKeyId(key: Buffer): string {
  return createHmac('sha256', key).update('spillway secret key id').digest('hex').slice(0, 8);
}

/**
 * A 32-byte key given as 64 hex characters or as base64 / base64url (43 or 44 characters);
 * undefined for anything else. Hex is tried first: 64 hex characters are never 32 bytes of base64.
 */
export function parseSecretKey(text: string): Buffer | undefined {
  const s = text.trim();
  if (/^[0-9a-fA-F]{64}$/.test(s)) return Buffer.from(s, 'hex');
  if (/^[A-Za-z0-9+/]{43}=?$/.test(s)) return Buffer.from(s, 'base64');
  if (/^[A-Za-z0-9_-]{43}=?$/.test(s)) return Buffer.from(s, 'base64url');
  return undefined;
}

/** A box over `current` (seals and opens) and `previous` (open only). */
export function createSecretBox(current: Buffer, previous: readonly Buffer[] = []): SecretBox {
  if (current.length !== 32) throw errors.config('SPILLWAY_SECRET_KEY must be 32 bytes');
  const keyId = secretKeyId(current);
  const byId = new Map<string, Buffer>([[keyId, current]]);
  for (const k of previous) {
    const id = secretKeyId(k);
    if (!byId.has(id)) byId.set(id, k);
  }
  const keyIds = Object.freeze([...byId.keys()]);

  return Object.freeze({
    keyId,
    keyIds,
    seal(plaintext: string, context: string): string {
      const iv = randomBytes(IV_BYTES);
      const cipher = createCipheriv('aes-256-gcm', current, iv);
      cipher.setAAD(Buffer.from(context));
      const ct = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
      return `${PREFIX}${keyId}:${Buffer.concat([iv, ct, cipher.getAuthTag()]).toString('base64url')}`;
    },
    open(stored: string, context: string): string {
      if (!isSealed(stored)) return stored;
      const m = /^enc:v1:([0-9a-f]{8}):([A-Za-z0-9_-]+)$/.exec(stored);
      if (!m) throw errors.config(`the stored secret of ${context} is not in the enc:v1 format`);
      const key = byId.get(m[1]!);
      if (!key)
        throw errors.config(
          `the secret of ${context} is sealed under key id ${m[1]}, which is neither SPILLWAY_SECRET_KEY (${keyId}) nor listed in SPILLWAY_SECRET_KEY_PREVIOUS`,
        );
      const raw = Buffer.from(m[2]!, 'base64url');
      if (raw.length < IV_BYTES + TAG_BYTES)
        throw errors.config(`the stored secret of ${context} is truncated`);
      try {
        const decipher = createDecipheriv('aes-256-gcm', key, raw.subarray(0, IV_BYTES));
        decipher.setAAD(Buffer.from(context));
        decipher.setAuthTag(raw.subarray(raw.length - TAG_BYTES));
        return Buffer.concat([
          decipher.update(raw.subarray(IV_BYTES, raw.length - TAG_BYTES)),
          decipher.final(),
        ]).toString('utf8');
      } catch {
        throw errors.config(
          `the secret of ${context} does not authenticate under key id ${m[1]} (altered, or sealed for another record)`,
        );
      }
    },
    state(stored: string) {
      if (!isSealed(stored)) return 'plaintext';
      return stored.startsWith(`${PREFIX}${keyId}:`) ? 'current' : 'previous';
    },
  });
}

/**
 * The box without SPILLWAY_SECRET_KEY: secrets are stored as they are (`spillway start` warns once
 * at start). Values sealed earlier still open when their key is in SPILLWAY_SECRET_KEY_PREVIOUS;
 * otherwise opening one names the variable to set.
 */
export function createPlainBox(previous: readonly Buffer[] = []): SecretBox {
  const sealed = previous.length > 0 ? createSecretBox(previous[0]!, previous.slice(1)) : undefined;
  return Object.freeze({
    keyId: 'none',
    keyIds: Object.freeze(sealed ? [...sealed.keyIds] : []),
    seal: (plaintext: string) => plaintext,
    open(stored: string, context: string): string {
      if (!isSealed(stored)) return stored;
      if (sealed) return sealed.open(stored, context);
      throw errors.config(
        `the secret of ${context} is stored encrypted, but SPILLWAY_SECRET_KEY is not set: set it (or list its key in SPILLWAY_SECRET_KEY_PREVIOUS)`,
      );
    },
    state: (stored: string) => (isSealed(stored) ? 'previous' : 'current'),
  });
}

import { createHmac, type Hmac, timingSafeEqual } from 'node:crypto';

/** Helpers shared by the verifiers of every kind. */

/** Stripe and Standard Webhooks both recommend five minutes either way. */
export const TIMESTAMP_TOLERANCE_S = 300;

/** Event ids become part of Redis keys: bounded and printable. */
const EVENT_ID = /^[\x21-\x7e]{1,256}$/;
const EVENT_TYPE = /^[\x20-\x7e]{1,256}$/;

export type Refusal = { ok: false; status: 400 | 401; reason: VerifyFailure; message: string };

/** Label values of spillway_ingest_verify_failures_total. */
export type VerifyFailure = 'missing_signature' | 'bad_signature' | 'timestamp' | 'bad_event';

export type Verified = { ok: true; id: string; type: string };

export interface Verifier {
  update(chunk: Buffer): void;
  /** Called once with the whole body (the same bytes that went through `update`). */
  finish(body: Buffer): Verified | Refusal;
}

export type Prepared = { ok: true; verifier: Verifier } | Refusal;

export function refuse(status: 400 | 401, reason: VerifyFailure, message: string): Refusal {
  return { ok: false, status, reason, message };
}

/**
 * Constant-time comparison. Lengths are not secret (every signature of one kind has the same
 * length), and timingSafeEqual throws on a mismatch, so a length check comes first.
 */
export function safeEqual(a: Buffer, b: Buffer): boolean {
  return a.length === b.length && timingSafeEqual(a, b);
}

/** True when any candidate matches; compares against every candidate so timing does not say which. */
export function anyEqual(expected: Buffer, candidates: readonly Buffer[]): boolean {
  let ok = false;
  for (const c of candidates) if (safeEqual(expected, c)) ok = true;
  return ok;
}

export function hmacSha256(key: string | Buffer, prefix?: string): Hmac {
  const h = createHmac('sha256', key);
  if (prefix !== undefined) h.update(prefix);
  return h;
}

/** The timestamp (unix seconds) is inside ±TIMESTAMP_TOLERANCE_S of now. */
export function timestampFresh(seconds: number, nowMs: number): boolean {
  return Number.isSafeInteger(seconds) && Math.abs(nowMs / 1000 - seconds) <= TIMESTAMP_TOLERANCE_S;
}

/** Checks an id and type taken from headers or the body; the verifier calls it only after the HMAC matched. */
export function identify(id: unknown, type: unknown, what: { id: string; type: string }): Verified | Refusal {
  if (typeof id !== 'string' || !EVENT_ID.test(id))
    return refuse(400, 'bad_event', `missing or invalid ${what.id}`);
  if (typeof type !== 'string' || !EVENT_TYPE.test(type))
    return refuse(400, 'bad_event', `missing or invalid ${what.type}`);
  return { ok: true, id, type };
}

/** Stripe and Standard Webhooks carry the event type (and Stripe the id) in the JSON body. */
export function parseJsonObject(body: Buffer): Record<string, unknown> | undefined {
  try {
    const v: unknown = JSON.parse(body.toString('utf8'));
    return v !== null && typeof v === 'object' && !Array.isArray(v)
      ? (v as Record<string, unknown>)
      : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The body half of the providers whose event is a JSON object (stripe, standard): HMAC the streamed
 * body, accept it if any `given` signature matches, then take id and type from the body
 * (`pickId` says where the id comes from).
 */
export function jsonEventVerifier(
  mac: Hmac,
  given: readonly Buffer[],
  text: { noMatch: string; notObject: string; id: string },
  pickId: (json: Record<string, unknown>) => unknown,
): Prepared {
  return {
    ok: true,
    verifier: {
      update: (chunk) => void mac.update(chunk),
      finish(body) {
        if (!anyEqual(mac.digest(), given)) return refuse(401, 'bad_signature', text.noMatch);
        const json = parseJsonObject(body);
        if (!json) return refuse(400, 'bad_event', text.notObject);
        return identify(pickId(json), json.type, { id: text.id, type: 'body type' });
      },
    },
  };
}

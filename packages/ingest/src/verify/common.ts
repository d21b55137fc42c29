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
  /**
   * Called once with the whole body (the same bytes that went through `update`). `macOk`: the
   * backend already computed the HMAC under the same keys (the io_uring ring thread,
   * RequestHead.nativeMac) and says whether it matched; nothing then went through `update`.
   */
  finish(body: Buffer, macOk?: boolean): Verified | Refusal;
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

/**
 * HMAC-SHA256 of one streamed body under every key a source accepts: its secret, plus the previous
 * ones during a rotation overlap (usually one key, two during a changeover).
 */
export interface MultiMac {
  update(chunk: Buffer): void;
  /** One digest per key, in key order; call once. */
  digests(): Buffer[];
}

export function hmacSha256(keys: readonly (string | Buffer)[], prefix?: string): MultiMac {
  // Made on first use: a body the backend verified natively never needs them.
  let macs: Hmac[] | undefined;
  const start = () =>
    (macs ??= keys.map((k) => {
      const h = createHmac('sha256', k);
      if (prefix !== undefined) h.update(prefix);
      return h;
    }));
  return {
    update(chunk) {
      for (const h of start()) h.update(chunk);
    },
    digests: () => start().map((h) => h.digest()),
  };
}

/**
 * True when any computed digest equals any given signature. Every pair is compared, so the time
 * says neither which key matched nor which signature.
 */
export function anyMatch(digests: readonly Buffer[], given: readonly Buffer[]): boolean {
  let ok = false;
  for (const d of digests) if (anyEqual(d, given)) ok = true;
  return ok;
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
 * The body half of the providers that sign the raw body alone and name the event in headers
 * (github, shopify): HMAC-SHA256(secret, body) must equal `given`, then id and type come from the
 * headers `names.id` and `names.type`. Names are as the provider spells them (messages quote them);
 * `headers` has them in lower case.
 */
/** A provider whose signature covers a timestamp (stripe, standard): checked against `nowMs`. */
export type TimedPrepare = (
  secrets: readonly string[],
  headers: Record<string, string>,
  nowMs: number,
) => Prepared;

export function headerEventVerifier(
  secrets: readonly string[],
  given: Buffer,
  headers: Record<string, string>,
  names: { signature: string; id: string; type: string },
): Prepared {
  const mac = hmacSha256(secrets);
  return {
    ok: true,
    verifier: {
      update: (chunk) => void mac.update(chunk),
      finish(_body, macOk) {
        if (!(macOk ?? anyMatch(mac.digests(), [given])))
          return refuse(401, 'bad_signature', `${names.signature} does not match the body`);
        return identify(headers[names.id.toLowerCase()], headers[names.type.toLowerCase()], names);
      },
    },
  };
}

/**
 * The body half of the providers whose event is a JSON object (stripe, standard): HMAC the streamed
 * body under every accepted key, accept it if any `given` signature matches any of them, then take id and type from the body
 * (`pickId` says where the id comes from).
 */
export function jsonEventVerifier(
  mac: MultiMac,
  given: readonly Buffer[],
  text: { noMatch: string; notObject: string; id: string },
  pickId: (json: Record<string, unknown>) => unknown,
): Prepared {
  return {
    ok: true,
    verifier: {
      update: (chunk) => mac.update(chunk),
      finish(body, macOk) {
        if (!(macOk ?? anyMatch(mac.digests(), given))) return refuse(401, 'bad_signature', text.noMatch);
        const json = parseJsonObject(body);
        if (!json) return refuse(400, 'bad_event', text.notObject);
        return identify(pickId(json), json.type, { id: text.id, type: 'body type' });
      },
    },
  };
}

import type { KeyObject } from 'node:crypto';
import type { Endpoint, EndpointAuth } from '@spillway/shared';
import { ed25519SigningKey } from './sign.ts';

/** Where an endpoint URL sends its requests. */
export interface Target {
  origin: string;
  path: string;
}

/**
 * What every attempt to one endpoint needs, worked out once per endpoint object: parsing the URL,
 * encoding credentials and decoding keys cost more than a Map get, and the hot path signs and sends
 * thousands of requests a second. Endpoints are re-read from the config cache twice a second, so a
 * plan lives about that long (a WeakMap keyed by the endpoint object: a changed endpoint is a new
 * object, and the old plan goes with the old object).
 */
export interface EndpointPlan {
  /** Undefined for a URL that is not http(s) (the attempt fails `invalid_url`). */
  target: Target | undefined;
  /** The endpoint's static headers and its `authorization`, added to every request. */
  headers: Readonly<Record<string, string>> | undefined;
  /** Statuses the endpoint asked to dead-letter at once (410 always is). */
  permanent: ReadonlySet<number> | undefined;
  /** Sign `v1` (HMAC with the whsec_ secrets). */
  hmac: boolean;
  /** Sign `v1a` with this key. */
  ed25519: KeyObject | undefined;
}

const plans = new WeakMap<Endpoint, EndpointPlan>();

export function planOf(endpoint: Endpoint): EndpointPlan {
  let p = plans.get(endpoint);
  if (p) return p;
  const schemes = endpoint.signatures ?? ['v1'];
  const headers: Record<string, string> = { ...endpoint.headers };
  if (endpoint.auth) headers.authorization = authorization(endpoint.auth);
  const permanent = endpoint.retry?.permanentStatuses;
  p = {
    target: target(endpoint.url),
    headers: Object.keys(headers).length > 0 ? Object.freeze(headers) : undefined,
    permanent: permanent && permanent.length > 0 ? new Set(permanent) : undefined,
    hmac: schemes.includes('v1'),
    ed25519:
      schemes.includes('v1a') && endpoint.ed25519
        ? ed25519SigningKey(endpoint.ed25519.privateKey)
        : undefined,
  };
  plans.set(endpoint, p);
  return p;
}

/** The `authorization` header value of an endpoint's credentials. */
export function authorization(auth: EndpointAuth): string {
  return auth.type === 'basic'
    ? `Basic ${Buffer.from(`${auth.username}:${auth.password}`).toString('base64')}`
    : `Bearer ${auth.token}`;
}

function target(href: string): Target | undefined {
  try {
    const u = new URL(href);
    if (u.protocol === 'http:' || u.protocol === 'https:')
      return { origin: u.origin, path: `${u.pathname}${u.search}` };
  } catch {}
  return undefined;
}

/** RFC 9110 field-name characters (`token`), lower-case as stored. */
const FIELD_NAME = /^[!#$%&'*+.^_`|~0-9a-z-]+$/;
/** Values: visible ASCII, spaces and tabs inside (no CR, LF or NUL: no header injection). */
const FIELD_VALUE = /^[\x21-\x7e]([\x20-\x7e\t]*[\x21-\x7e])?$/;
/** Hop-by-hop (RFC 9110 §7.6.1) and framing headers: undici and the connection own them. */
const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'transfer-encoding', 'te', 'trailer', 'upgrade']);
/** Headers Spillway sets itself on every delivery (the contract's list). */
const OWN = new Set(['host', 'content-length', 'content-type', 'user-agent']);

/**
 * Why an endpoint may not set this static header (undefined: it may). `name` must already be
 * lower-case. The reasons are the admin API's 400 messages.
 */
export function headerRefusal(name: string, value: string): string | undefined {
  if (!FIELD_NAME.test(name)) return "is not a valid header name (letters, digits and !#$%&'*+.^_`|~- only)";
  if (name.startsWith('webhook-'))
    return 'is reserved: webhook-* headers carry the Standard Webhooks signature';
  if (name.startsWith('spillway-')) return 'is reserved: spillway-* headers are set by Spillway';
  if (name.startsWith('proxy-') || HOP_BY_HOP.has(name))
    return 'is a hop-by-hop header, which belongs to the connection, not the endpoint';
  if (OWN.has(name)) return 'is set by Spillway on every delivery';
  if (name === 'authorization') return 'is set from the endpoint\'s "auth" (stored as a secret): use that';
  if (!FIELD_VALUE.test(value))
    return 'has a value that is empty or holds characters other than visible ASCII, spaces and tabs';
  return undefined;
}

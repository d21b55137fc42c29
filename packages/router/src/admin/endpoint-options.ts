import { generateEd25519, headerRefusal, parseEd25519PrivateKey } from '@spillway/delivery';
import {
  type BatchPolicy,
  type Endpoint,
  type EndpointAuth,
  errors,
  type OrderingMode,
  parseDuration,
  type RetryPolicy,
  type SignatureScheme,
} from '@spillway/shared';

/**
 * The delivery options an endpoint may opt into — retry policy, static headers, credentials,
 * signature schemes (HMAC `v1`, Ed25519 `v1a`), batching, per-key ordering — as the admin API takes
 * and shows them: their JSON schemas (validated by fastify, published in /openapi.json) and the
 * rules a schema cannot say (reserved header names, durations that parse, option combinations).
 * What a receiver sees of each is docs/delivery.md.
 */

const DURATION = '^\\s*\\d+(\\.\\d+)?\\s*(ms|s|m|h)\\s*$';
/** The longest one delay of an endpoint's schedule may be (the default schedule's longest is 10 h). */
const MAX_DELAY_MS = 24 * 3_600_000;
const MIN_DELAY_MS = 10;

const retrySchema = {
  type: 'object',
  additionalProperties: false,
  description:
    'the endpoint’s retry policy; each field absent = the installation’s (SPILLWAY_RETRY_SCHEDULE, 410 alone permanent)',
  properties: {
    schedule: {
      type: 'array',
      maxItems: 50,
      items: { type: 'string', pattern: DURATION, maxLength: 32 },
      description:
        'delays between attempts, e.g. ["10s","1m","10m"]; attempts = length + 1 unless maxAttempts',
    },
    maxAttempts: {
      type: 'integer',
      minimum: 1,
      maximum: 100,
      description: 'attempts in all before the DLQ; past the schedule its last delay repeats',
    },
    permanentStatuses: {
      type: 'array',
      maxItems: 100,
      uniqueItems: true,
      items: { type: 'integer', minimum: 300, maximum: 599 },
      description: 'answers dead-lettered at once instead of retried, e.g. [400,401,403,404,422]',
    },
  },
} as const;

const HEADER_NAME = "^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,64}$";
const headersSchema = {
  type: 'object',
  maxProperties: 32,
  propertyNames: { pattern: HEADER_NAME },
  additionalProperties: { type: 'string', minLength: 1, maxLength: 1024 },
  description:
    'static headers sent with every delivery; refused: webhook-*, spillway-*, proxy-*, hop-by-hop (connection, keep-alive, transfer-encoding, te, trailer, upgrade), host, content-length, content-type, user-agent, authorization (use auth)',
} as const;

const CREDENTIAL = '^[\\x21-\\x7e]([\\x20-\\x7e]*[\\x21-\\x7e])?$';
const authInput = {
  oneOf: [
    {
      type: 'object',
      additionalProperties: false,
      required: ['type', 'username', 'password'],
      properties: {
        type: { const: 'basic' },
        username: { type: 'string', minLength: 1, maxLength: 256, pattern: '^[\\x20-\\x39\\x3b-\\x7e]+$' },
        password: { type: 'string', minLength: 1, maxLength: 256, pattern: CREDENTIAL },
      },
    },
    {
      type: 'object',
      additionalProperties: false,
      required: ['type', 'token'],
      properties: {
        type: { const: 'bearer' },
        token: { type: 'string', minLength: 1, maxLength: 4096, pattern: '^[\\x21-\\x7e]+$' },
      },
    },
  ],
  description:
    'sent as `authorization: Basic …` or `Bearer …` with every delivery; stored with the endpoint’s secrets and never shown again',
} as const;

/** What the API shows of the credentials: never the password or the token. */
const authOutput = {
  type: 'object',
  required: ['type'],
  properties: { type: { type: 'string', enum: ['basic', 'bearer'] }, username: { type: 'string' } },
} as const;

const signaturesSchema = {
  type: 'array',
  minItems: 1,
  maxItems: 2,
  uniqueItems: true,
  items: { type: 'string', enum: ['v1', 'v1a'] },
  description:
    'schemes in webhook-signature: v1 = HMAC-SHA256 with the whsec_ secret (default), v1a = Ed25519; both during a migration',
} as const;

const ed25519PrivateKey = {
  type: 'string',
  pattern: '^whsk_[A-Za-z0-9+/]{43,86}={0,2}$',
  description:
    'import an Ed25519 key (whsk_ + base64 of the 32-byte seed, or seed + public key); without one, enabling v1a generates a key pair',
} as const;

const ed25519Output = {
  type: 'object',
  required: ['publicKey', 'createdAt'],
  properties: {
    publicKey: { type: 'string', description: 'whpk_ + base64 of the 32-byte Ed25519 public key' },
    createdAt: { type: 'string', format: 'date-time' },
  },
} as const;

export const BATCH_DEFAULTS = { maxBytes: 1_048_576, lingerMs: 100 } as const;
const batchSchema = {
  type: 'object',
  additionalProperties: false,
  required: ['maxEvents'],
  properties: {
    maxEvents: { type: 'integer', minimum: 1, maximum: 1000 },
    maxBytes: {
      type: 'integer',
      minimum: 1024,
      maximum: 8 * 1_048_576,
      description: `request body bytes a batch stays under (one larger event goes alone); default ${BATCH_DEFAULTS.maxBytes}`,
    },
    lingerMs: {
      type: 'integer',
      minimum: 0,
      maximum: 10_000,
      description: `how long a partial batch waits for more events; default ${BATCH_DEFAULTS.lingerMs}`,
    },
  },
  description: 'send several events per request, as a JSON array (docs/delivery.md)',
} as const;

const orderingSchema = {
  type: 'string',
  enum: ['none', 'per-key'],
  description:
    'per-key: events sharing an orderingKey are delivered one at a time, in acceptance order (default none)',
} as const;

/** PATCH may clear an option with null. */
const orNull = <S extends object>(schema: S) => ({ anyOf: [schema, { type: 'null' }] }) as const;

/** Properties of POST …/endpoints. */
export const createOptionProps = {
  retry: retrySchema,
  headers: headersSchema,
  auth: authInput,
  signatures: signaturesSchema,
  ed25519PrivateKey,
  batch: batchSchema,
  ordering: orderingSchema,
} as const;

/** Properties of PATCH …/endpoints/:eid (null clears retry, headers, auth, batch). */
export const patchOptionProps = {
  retry: orNull(retrySchema),
  headers: orNull(headersSchema),
  auth: orNull(authInput),
  signatures: signaturesSchema,
  ed25519PrivateKey,
  batch: orNull(batchSchema),
  ordering: orderingSchema,
} as const;

/** Properties of an endpoint in answers. */
export const outputOptionProps = {
  retry: retrySchema,
  headers: { type: 'object', additionalProperties: { type: 'string' } },
  auth: authOutput,
  signatures: signaturesSchema,
  ed25519: ed25519Output,
  batch: batchSchema,
  ordering: orderingSchema,
} as const;

export const publicKeySchema = {
  type: 'object',
  required: ['endpointId', 'algorithm', 'publicKey', 'publicKeyPem', 'createdAt'],
  properties: {
    endpointId: { type: 'string' },
    algorithm: { const: 'ed25519' },
    publicKey: { type: 'string', description: 'whpk_ + base64 (Standard Webhooks)' },
    publicKeyPem: { type: 'string', description: 'the same key as SPKI PEM' },
    createdAt: { type: 'string', format: 'date-time' },
  },
} as const;

/** The options as a request body carries them (undefined = not given; null = clear, PATCH only). */
export interface OptionsBody {
  retry?: RetryPolicy | null;
  headers?: Record<string, string> | null;
  auth?: EndpointAuth | null;
  signatures?: SignatureScheme[];
  ed25519PrivateKey?: string;
  batch?: Partial<BatchPolicy> | null;
  ordering?: OrderingMode;
}

/**
 * Applies the options of a POST or PATCH body to `ep` (a copy: the stored endpoint, or the one
 * being created) and checks what the schema cannot: every duration parses and lies within
 * 10 ms–24 h, header names are not reserved (case-insensitively, once each), an imported key is a
 * real Ed25519 key, batching and per-key ordering are not combined. Throws invalid_body (400)
 * naming the field; nothing is written then.
 */
export function applyOptions(ep: Endpoint, b: OptionsBody): Endpoint {
  const next: Endpoint = { ...ep };
  if (b.retry === null) delete next.retry;
  else if (b.retry) next.retry = checkRetry(b.retry);
  if (b.headers === null) delete next.headers;
  else if (b.headers) next.headers = checkHeaders(b.headers);
  if (b.auth === null) delete next.auth;
  else if (b.auth) next.auth = b.auth;
  if (b.batch === null) delete next.batch;
  else if (b.batch)
    next.batch = {
      maxEvents: b.batch.maxEvents!,
      maxBytes: b.batch.maxBytes ?? BATCH_DEFAULTS.maxBytes,
      lingerMs: b.batch.lingerMs ?? BATCH_DEFAULTS.lingerMs,
    };
  if (b.ordering === 'none') delete next.ordering;
  else if (b.ordering) next.ordering = b.ordering;
  if (b.ed25519PrivateKey !== undefined) {
    const pair = parseEd25519PrivateKey(b.ed25519PrivateKey);
    if (!pair)
      throw errors.invalidBody(
        'body/ed25519PrivateKey must be whsk_ + base64 of a 32-byte Ed25519 seed (or of the seed followed by its public key)',
      );
    next.ed25519 = pair;
  }
  if (b.signatures) {
    if (b.signatures.length === 1 && b.signatures[0] === 'v1') delete next.signatures;
    else next.signatures = [...b.signatures];
  }
  // Enabling v1a without a key of its own gives the endpoint one (its public half is published).
  if (next.signatures?.includes('v1a') && !next.ed25519) next.ed25519 = generateEd25519();
  if (next.batch && next.ordering === 'per-key')
    throw errors.invalidBody(
      'body: batch and ordering "per-key" cannot be combined (an ordered key sends one event at a time)',
    );
  return next;
}

function checkRetry(r: RetryPolicy): RetryPolicy {
  const out: RetryPolicy = {};
  if (r.schedule) {
    out.schedule = r.schedule.map((d, i) => {
      const ms = parseDuration(d);
      if (ms === undefined || ms < MIN_DELAY_MS || ms > MAX_DELAY_MS)
        throw errors.invalidBody(
          `body/retry/schedule/${i} must be a duration between ${MIN_DELAY_MS}ms and 24h like 5s, 30m, 2h (got "${d}")`,
        );
      return d.trim();
    });
    if (out.schedule.length === 0 && r.maxAttempts !== undefined && r.maxAttempts > 1)
      throw errors.invalidBody('body/retry: an empty schedule allows one attempt only (maxAttempts 1)');
  }
  if (r.maxAttempts !== undefined) out.maxAttempts = r.maxAttempts;
  if (r.permanentStatuses) out.permanentStatuses = [...r.permanentStatuses].sort((a, b) => a - b);
  return out;
}

function checkHeaders(h: Record<string, string>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [raw, value] of Object.entries(h)) {
    const name = raw.toLowerCase();
    if (name in out)
      throw errors.invalidBody(`body/headers/${raw} is given twice (header names ignore case)`);
    const refusal = headerRefusal(name, value);
    if (refusal) throw errors.invalidBody(`body/headers/${raw} ${refusal}`);
    out[name] = value;
  }
  return out;
}

/** An endpoint as the API shows it: credentials reduced to their type (and user name), the private key dropped. */
export function publicEndpoint(ep: Endpoint): Omit<Endpoint, 'auth' | 'ed25519'> & {
  auth?: { type: 'basic' | 'bearer'; username?: string };
  ed25519?: { publicKey: string; createdAt: string };
} {
  const { auth, ed25519, ...rest } = ep;
  return {
    ...rest,
    ...(auth
      ? { auth: auth.type === 'basic' ? { type: 'basic', username: auth.username } : { type: 'bearer' } }
      : {}),
    ...(ed25519 ? { ed25519: { publicKey: ed25519.publicKey, createdAt: ed25519.createdAt } } : {}),
  };
}

/**
 * The error catalog of Spillway. Every error a package raises on purpose is a SpillwayError with a
 * stable `code` (SPW_ERR_*), an HTTP `status` for the edges that answer clients, and a snake_case
 * `apiCode` for the admin API's `{"error":{"code"}}` body.
 */
export class SpillwayError extends Error {
  readonly code: string;
  readonly status: number;
  readonly apiCode: string;
  /** Seconds a client should wait before trying again (503/429). */
  readonly retryAfter?: number;

  constructor(
    code: string,
    apiCode: string,
    status: number,
    message: string,
    opts?: { cause?: unknown; retryAfter?: number },
  ) {
    super(message, opts?.cause === undefined ? undefined : { cause: opts.cause });
    this.name = 'SpillwayError';
    this.code = code;
    this.apiCode = apiCode;
    this.status = status;
    if (opts?.retryAfter !== undefined) this.retryAfter = opts.retryAfter;
  }
}

const make =
  (code: string, apiCode: string, status: number) =>
  (message: string, opts?: { cause?: unknown; retryAfter?: number }) =>
    new SpillwayError(code, apiCode, status, message, opts);

export const errors = {
  config: make('SPW_ERR_CONFIG', 'invalid_config', 500),
  invalidBody: make('SPW_ERR_INVALID_BODY', 'invalid_body', 400),
  /** A path parameter or query string that does not validate. */
  invalidRequest: make('SPW_ERR_INVALID_REQUEST', 'invalid_request', 400),
  /** A body that is not JSON (or empty where JSON is required). */
  invalidJson: make('SPW_ERR_INVALID_JSON', 'invalid_json', 400),
  /** A malformed request the catalog has no better name for. */
  badRequest: make('SPW_ERR_BAD_REQUEST', 'bad_request', 400),
  unauthorized: make('SPW_ERR_UNAUTHORIZED', 'unauthorized', 401),
  forbidden: make('SPW_ERR_FORBIDDEN', 'forbidden', 403),
  notFound: make('SPW_ERR_NOT_FOUND', 'not_found', 404),
  /** A method the route does not serve (ingest takes POST). */
  methodNotAllowed: make('SPW_ERR_METHOD_NOT_ALLOWED', 'method_not_allowed', 405),
  /** The request head or body did not arrive in time (or too slowly). */
  requestTimeout: make('SPW_ERR_REQUEST_TIMEOUT', 'request_timeout', 408),
  conflict: make('SPW_ERR_CONFLICT', 'conflict', 409),
  tooLarge: make('SPW_ERR_TOO_LARGE', 'payload_too_large', 413),
  unsupportedMediaType: make('SPW_ERR_UNSUPPORTED_MEDIA_TYPE', 'unsupported_media_type', 415),
  rateLimited: make('SPW_ERR_RATE_LIMITED', 'rate_limited', 429),
  /** A request line + headers over the size limit. */
  headersTooLarge: make('SPW_ERR_HEADERS_TOO_LARGE', 'headers_too_large', 431),
  /** Durable storage (Redis) or the spill log (Kafka) cannot take the write right now. */
  unavailable: make('SPW_ERR_UNAVAILABLE', 'unavailable', 503),
  /** A delivery target resolved to an address outside the allowlist. */
  targetForbidden: make('SPW_ERR_TARGET_FORBIDDEN', 'target_forbidden', 400),
  internal: make('SPW_ERR_INTERNAL', 'internal', 500),
  /** A transfer coding (or other HTTP feature) the ingest port does not implement. */
  notImplemented: make('SPW_ERR_NOT_IMPLEMENTED', 'not_implemented', 501),
  httpVersionNotSupported: make('SPW_ERR_HTTP_VERSION_NOT_SUPPORTED', 'http_version_not_supported', 505),
} as const;

export function isSpillwayError(err: unknown, code?: string): err is SpillwayError {
  return err instanceof SpillwayError && (code === undefined || err.code === code);
}

/** What an HTTP edge sends for an error: status, headers and the `{"error":{"code","message"}}` body. */
export interface ErrorResponse {
  status: number;
  headers: Record<string, string>;
  body: { error: { code: string; message: string } };
  /** The catalog error the response was built from (log it when `status >= 500`). */
  error: SpillwayError;
}

/** HTTP-framework errors (fastify, http-errors) carry a status and a code; these codes have catalog names. */
const FRAMEWORK_CODES: Record<string, (message: string) => SpillwayError> = {
  FST_ERR_CTP_INVALID_JSON_BODY: errors.invalidJson,
  FST_ERR_CTP_EMPTY_JSON_BODY: errors.invalidJson,
  FST_ERR_CTP_BODY_TOO_LARGE: errors.tooLarge,
  FST_ERR_CTP_INVALID_MEDIA_TYPE: errors.unsupportedMediaType,
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: errors.badRequest,
};
const BY_STATUS: Record<number, (message: string) => SpillwayError> = {
  400: errors.badRequest,
  413: errors.tooLarge,
  415: errors.unsupportedMediaType,
};

/**
 * Any thrown value as a catalog error: a SpillwayError as is; Redis unreachable as `unavailable`
 * (503, retry in 1 s: storage is down, the request is not wrong); a framework error with a 4xx
 * status by its code or status; anything else as `internal` (its message is not shown to clients).
 */
export function toSpillwayError(err: unknown): SpillwayError {
  if (err instanceof SpillwayError) return err;
  if (isRedisDown(err))
    return errors.unavailable('storage (Redis) is unavailable; retry shortly', { cause: err, retryAfter: 1 });
  const e = err as { statusCode?: unknown; code?: unknown; message?: unknown };
  const status = typeof e?.statusCode === 'number' ? e.statusCode : 500;
  const message = typeof e?.message === 'string' ? e.message : String(err);
  if (status >= 400 && status < 500) {
    const make = FRAMEWORK_CODES[String(e.code)] ?? BY_STATUS[status];
    if (make) return make(message);
    // Another 4xx of the framework (405, 414...): its status, the generic code.
    return new SpillwayError('SPW_ERR_BAD_REQUEST', 'bad_request', status, message);
  }
  return errors.internal('internal error', { cause: err });
}

/** The one mapping from an error to an HTTP answer, built from the catalog above. */
export function toResponse(err: unknown): ErrorResponse {
  const error = toSpillwayError(err);
  const headers: Record<string, string> = {};
  if (error.retryAfter !== undefined) headers['retry-after'] = String(error.retryAfter);
  return {
    status: error.status,
    headers,
    body: { error: { code: error.apiCode, message: error.message } },
    error,
  };
}

/** ioredis gives up on a command with these when the server is unreachable. */
export function isRedisDown(err: unknown): boolean {
  const e = err as { name?: string; message?: string; code?: string } | undefined;
  return (
    e?.name === 'MaxRetriesPerRequestError' ||
    e?.code === 'ECONNREFUSED' ||
    /Connection is closed|Stream isn't writeable|ECONNREFUSED|ETIMEDOUT/.test(e?.message ?? '')
  );
}

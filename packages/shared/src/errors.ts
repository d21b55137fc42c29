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
  unauthorized: make('SPW_ERR_UNAUTHORIZED', 'unauthorized', 401),
  forbidden: make('SPW_ERR_FORBIDDEN', 'forbidden', 403),
  notFound: make('SPW_ERR_NOT_FOUND', 'not_found', 404),
  conflict: make('SPW_ERR_CONFLICT', 'conflict', 409),
  tooLarge: make('SPW_ERR_TOO_LARGE', 'payload_too_large', 413),
  rateLimited: make('SPW_ERR_RATE_LIMITED', 'rate_limited', 429),
  /** Durable storage (Redis) or the spill log (Kafka) cannot take the write right now. */
  unavailable: make('SPW_ERR_UNAVAILABLE', 'unavailable', 503),
  /** A delivery target resolved to an address outside the allowlist. */
  targetForbidden: make('SPW_ERR_TARGET_FORBIDDEN', 'target_forbidden', 400),
  internal: make('SPW_ERR_INTERNAL', 'internal', 500),
} as const;

export function isSpillwayError(err: unknown, code?: string): err is SpillwayError {
  return err instanceof SpillwayError && (code === undefined || err.code === code);
}

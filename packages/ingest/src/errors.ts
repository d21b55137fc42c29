/**
 * Every error answer of the ingest port, whichever backend or HTTP version sends it, comes from the
 * shared error catalog (`toResponse` in @spillway/shared): the same status, `{"error":{"code",
 * "message"}}` body and Retry-After as the admin API would give for that error. The io_uring addon's
 * native answers (native/src/core/ring.c `api_code()`) use the catalog's codes too; a test checks its
 * table against the catalog (test/error-catalog.test.ts).
 */
import { type SpillwayError, toResponse } from '@spillway/shared';
import type { IngestResponse } from './server.ts';

export function errorResponse(
  err: SpillwayError | unknown,
  opts: { headers?: Record<string, string>; close?: boolean } = {},
): IngestResponse {
  const r = toResponse(err);
  const headers = { ...r.headers, ...opts.headers };
  const out: IngestResponse = { status: r.status, body: r.body };
  if (Object.keys(headers).length > 0) out.headers = headers;
  if (opts.close) out.close = true;
  return out;
}

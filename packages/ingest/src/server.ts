/**
 * The IngestServer interface: what every ingest backend (node:http, io_uring addon) implements, and
 * the IngestHandler the shared pipeline gives them. A backend owns sockets and HTTP framing; the
 * pipeline owns every decision (source lookup, allowCidrs, rate, caps, HMAC, dedup, enqueue).
 */

export interface RequestHead {
  method: string;
  /** Path with query string, as received. */
  url: string;
  /** Header names lowercased; repeated headers joined with ", " except set-cookie. */
  headers: Record<string, string>;
  remoteAddress: string;
  /** Content-Length when the request sent one; undefined for chunked bodies. */
  contentLength: number | undefined;
}

export interface IngestResponse {
  status: number;
  headers?: Record<string, string>;
  /** JSON-serialisable body; sent as application/json. */
  body?: unknown;
  /** Close the connection after answering (e.g. after 413 without reading the rest). */
  close?: boolean;
}

/** Receives the body of one accepted request, chunk by chunk, then produces the response. */
export interface BodySink {
  /** Largest body this request may have; the backend answers 413 and closes past it. */
  readonly maxBodyBytes: number;
  write(chunk: Buffer): void;
  end(): Promise<IngestResponse>;
  /** The client went away or the body broke a rule; release whatever the sink holds. */
  abort(reason: string): void;
}

export type HeadDecision = { reject: IngestResponse } | { accept: BodySink };

export interface IngestHandler {
  /** Called once the request line and headers are in, before any body byte is read. */
  begin(head: RequestHead): HeadDecision | Promise<HeadDecision>;
}

export interface IngestServerOptions {
  handler: IngestHandler;
  port: number;
  host: string;
  /** Hard cap for any body regardless of source (the backend enforces it before the pipeline). */
  maxBodyBytes?: number;
  /** Time allowed for the request line and headers (slowloris guard). */
  headersTimeoutMs?: number;
  /** Time allowed for the whole request. */
  requestTimeoutMs?: number;
  /** Set SO_REUSEPORT on the listener (several ingest processes on one port). */
  reusePort?: boolean;
}

export interface IngestServer {
  readonly backend: 'node' | 'uring';
  /** Resolves with the bound port (listen(0) in tests). */
  listen(): Promise<{ port: number }>;
  /** Stops accepting, lets in-flight requests finish (bounded), then closes. */
  close(): Promise<void>;
  /**
   * Optional: per-path body caps (exact path, query ignored) the backend enforces itself, before
   * the handler hears of the request — a POST whose Content-Length is over its path's cap gets 413
   * at once. Replaces the previous table; safe to call before listen() and while serving. Backends
   * without it rely on `BodySink.maxBodyBytes` alone (the pipeline's caps hold either way). Feed it
   * from `IngestPipeline.routeCaps(sources)`.
   */
  setRoutes?(caps: ReadonlyMap<string, number>): void;
}

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
  /**
   * Set by a backend that HMACs the body itself (the io_uring ring thread, from its route table):
   * the source kind and the secrets it verifies under. When they are the source's live secrets,
   * the pipeline skips its own HMAC and `BodySink.end` gets the backend's verdict.
   */
  nativeMac?: { kind: string; secrets: readonly string[] };
}

/** What a backend may enforce for one ingest path before the pipeline hears of a request. */
export interface RouteSpec {
  maxBodyBytes: number;
  /** Verify POST bodies in the backend (kind and the source's live secrets, at most two). */
  verify?: { kind: string; secrets: readonly string[] };
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
  /**
   * The sink keeps `chunk` as it is, without a copy: a backend hands over bytes it never touches
   * again (the io_uring addon's chunks are copies made for the call; node:http's are copied in
   * ./backends/exchange.ts). Copying every chunk here doubled the external memory of each body, junk
   * included, and a stream of oversized junk paid for it in full garbage collections
   * (docs/benchmarks/ingest-profile.md).
   */
  write(chunk: Buffer): void;
  /** `macOk`: the backend's HMAC verdict for a request whose head carried `nativeMac`. */
  end(macOk?: boolean): Promise<IngestResponse>;
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
  /**
   * Terminate TLS on the ingest port: a ClientHello is answered with this certificate and ALPN
   * picks `h2` or `http/1.1`. Absent: TLS connections are closed (and counted).
   */
  tls?: TlsCredentials;
  /** HTTP/2 limits (h2 over TLS and prior-knowledge h2c). */
  http2?: Http2Limits;
  /**
   * A listening TCP socket to adopt instead of binding `host:port` (a restart hands its socket to its
   * successor, so no SYN meets a closed port).
   */
  listenFd?: number;
}

/** PEM certificate chain and private key. */
export interface TlsCredentials {
  cert: string | Buffer;
  key: string | Buffer;
}

export interface Http2Limits {
  /** SETTINGS_MAX_CONCURRENT_STREAMS per connection. Default 100. */
  maxConcurrentStreams?: number;
  /** SETTINGS_MAX_HEADER_LIST_SIZE, bytes. Default 16 KiB (the HTTP/1.1 head limit). */
  maxHeaderListBytes?: number;
  /**
   * Streams the client may reset in one second before the connection is told GOAWAY
   * (ENHANCE_YOUR_CALM) and closed: the HTTP/2 rapid-reset attack (CVE-2023-44487) opens and
   * cancels streams so each costs the server a request's work and the client nothing. Default 100.
   */
  maxResetsPerSecond?: number;
}

export interface CloseOptions {
  /**
   * A restart hands over: stop accepting, answer every request still to come with
   * `connection: close` (HTTP/2: GOAWAY), and let idle keep-alive connections reach their idle
   * timeout instead of cutting them (a client may be writing a request on one right now; it closes
   * an idle connection before the server's timeout). Bounded by the backend's close grace.
   */
  drain?: boolean;
}

export interface IngestServer {
  readonly backend: 'node' | 'uring';
  /** Resolves with the bound port (listen(0) in tests). */
  listen(): Promise<{ port: number }>;
  /** Stops accepting, lets in-flight requests finish (bounded), then closes. */
  close(opts?: CloseOptions): Promise<void>;
  /**
   * Replaces the TLS certificate and key for new handshakes (connections already up keep theirs).
   * Throws on credentials that do not load, keeping the previous ones. Given a function, calls it
   * for the credentials (a reload that reads files; a read that fails is counted as a failed reload).
   */
  setTlsCredentials?(creds: TlsCredentials | (() => TlsCredentials)): void;
  /** The listening socket's descriptor once listening (handed to a successor process on restart). */
  listenFd?(): number | undefined;
  /**
   * Optional: per-path body caps (exact path, query ignored) the backend enforces itself, before
   * the handler hears of the request — a POST whose Content-Length is over its path's cap gets 413
   * at once. Replaces the previous table; safe to call before listen() and while serving. Backends
   * without it rely on `BodySink.maxBodyBytes` alone (the pipeline's caps hold either way). Feed it
   * from `IngestPipeline.routeCaps(sources)`. A RouteSpec with `verify` also lets a backend that can
   * (io_uring) HMAC the body on its own thread.
   */
  setRoutes?(routes: ReadonlyMap<string, number | RouteSpec>): void;
}

/**
 * HTTP/2 for the front door (./front.ts): a node:http2 server that never listens itself; it gets
 * TLS connections whose ALPN chose `h2` and cleartext connections that opened with the HTTP/2
 * preface (prior knowledge). Each stream goes through the same IngestHandler as an HTTP/1.1
 * request: head → begin → body into the sink → the answer once the intake made it durable.
 */
import diagnostics_channel from 'node:diagnostics_channel';
import http2 from 'node:http2';
import type { Duplex } from 'node:stream';
import { errors } from '@spillway/shared';
import { errorResponse } from '../errors.ts';
import type { Http2Limits, IngestHandler, IngestResponse, RequestHead } from '../server.ts';
import { serveExchange } from './exchange.ts';

export interface Http2Options {
  handler: IngestHandler;
  limits?: Http2Limits;
  maxBodyBytes?: number;
  requestTimeoutMs?: number;
  /** A connection with no open stream and no frame for this long is closed (GOAWAY). Default 5 s. */
  idleTimeoutMs?: number;
  /** A connection was closed for resetting streams too fast (metric). */
  onRapidReset?: () => void;
}

const {
  NGHTTP2_NO_ERROR,
  NGHTTP2_REFUSED_STREAM,
  NGHTTP2_ENHANCE_YOUR_CALM,
  HTTP2_HEADER_STATUS,
  HTTP2_HEADER_CONTENT_TYPE,
  HTTP2_HEADER_CONTENT_LENGTH,
} = http2.constants;

/** Connection-specific fields HTTP/2 forbids (RFC 9113 §8.2.2); node throws if a response has them. */
const FORBIDDEN = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'upgrade']);

interface SessionState {
  /** The connection as handed over (TLS socket, or the stream over a cleartext one). */
  conn: Duplex | undefined;
  remoteAddress: string;
  windowStart: number;
  resets: number;
  tripped: boolean;
  open: number;
}

/** Streams this side closed (a refusal, a cap): the others that close with a code were reset by the peer. */
const closedHere = new WeakSet<http2.ServerHttp2Stream>();

/**
 * How long a connection cut for rapid reset stays open (not read) after its GOAWAY, so its client
 * reads why before the close resets what it has not read yet.
 */
const GOAWAY_LINGER_MS = 1000;

/** Sessions the reset guard watches, each with the function that counts one reset on it. */
const guarded = new WeakMap<http2.Http2Session, () => void>();

/*
 * The rapid-reset count has to be taken while nghttp2 walks a read: one 64 KiB read holds more than a
 * thousand HEADERS + RST_STREAM pairs, and the 'stream' events for them only run once the whole read
 * is processed, by which time those streams are gone (and nghttp2's own last-resort limit may have
 * killed the session). node:http2 publishes `http2.server.stream.close` synchronously as each
 * stream closes, with its code: a stream closed with a code by the peer, not by us, is a reset.
 */
// A stream can be destroyed with an error (refused after a GOAWAY, reset) before its 'stream' event
// runs and a listener is attached; an 'error' with no listener would take the process down.
diagnostics_channel.subscribe('http2.server.stream.created', (msg) => {
  const stream = (msg as { stream: http2.ServerHttp2Stream }).stream;
  if (stream.session && guarded.has(stream.session)) stream.on('error', () => {});
});
diagnostics_channel.subscribe('http2.server.stream.close', (msg) => {
  const stream = (msg as { stream: http2.ServerHttp2Stream }).stream;
  if (stream.rstCode === NGHTTP2_NO_ERROR || closedHere.has(stream)) return;
  const session = stream.session;
  if (!session || session.destroyed) return;
  guarded.get(session)?.();
});

function close(stream: http2.ServerHttp2Stream, code: number): void {
  closedHere.add(stream);
  if (!stream.closed) stream.close(code);
}

function headOf(stream: http2.ServerHttp2Stream, h: http2.IncomingHttpHeaders, remote: string): RequestHead {
  const headers: Record<string, string> = {};
  for (const [k, v] of Object.entries(h)) {
    if (v === undefined || k.charCodeAt(0) === 0x3a) continue;
    headers[k] = Array.isArray(v) ? v.join(', ') : String(v);
  }
  const authority = h[':authority'];
  if (headers.host === undefined && typeof authority === 'string') headers.host = authority;
  const cl = headers['content-length'];
  const contentLength =
    cl !== undefined && /^\d+$/.test(cl) ? Number(cl) : stream.endAfterHeaders ? 0 : undefined;
  return {
    method: String(h[':method'] ?? 'GET'),
    url: String(h[':path'] ?? '/'),
    headers,
    remoteAddress: remote,
    contentLength,
  };
}

/**
 * Sends the answer. A request whose body was not (all) read is then reset with NO_ERROR once the
 * answer is out (RFC 9113 §8.1: the response is complete, the client stops sending), which is the
 * HTTP/2 form of HTTP/1.1's answer-and-close.
 */
function respond(stream: http2.ServerHttp2Stream, r: IngestResponse, headOnly: boolean): void {
  if (stream.destroyed || stream.closed || stream.headersSent) return;
  const body = r.body === undefined ? '' : JSON.stringify(r.body);
  const headers: http2.OutgoingHttpHeaders = {
    [HTTP2_HEADER_STATUS]: r.status,
    [HTTP2_HEADER_CONTENT_TYPE]: 'application/json',
    [HTTP2_HEADER_CONTENT_LENGTH]: Buffer.byteLength(body),
  };
  for (const [name, value] of Object.entries(r.headers ?? {})) {
    const n = name.toLowerCase();
    if (FORBIDDEN.has(n) || n.charCodeAt(0) === 0x3a || n === 'content-length' || n === 'content-type')
      continue;
    headers[n] = value;
  }
  const unread = !stream.readableEnded;
  if (unread) stream.once('finish', () => close(stream, NGHTTP2_NO_ERROR));
  if (headOnly || body === '') {
    stream.respond(headers, { endStream: true });
  } else {
    stream.respond(headers);
    stream.end(body);
  }
}

export interface Http2Front {
  readonly server: http2.Http2Server;
  /**
   * Serves one connection: a TLS socket whose ALPN chose h2, or a stream over a cleartext socket
   * (its client address given: node:http2 cannot see it through the stream).
   */
  serve(conn: Duplex, remoteAddress: string | undefined): void;
}

export function createHttp2(opts: Http2Options): Http2Front {
  const { handler } = opts;
  const limits = opts.limits ?? {};
  const maxResets = limits.maxResetsPerSecond ?? 100;
  const hardMax = opts.maxBodyBytes ?? Number.POSITIVE_INFINITY;
  const requestTimeout = opts.requestTimeoutMs ?? 30_000;
  const idleTimeout = opts.idleTimeoutMs ?? 5000;
  /** Set while a connection is handed to node:http2, which creates its session synchronously. */
  let handing: { conn: Duplex; remoteAddress: string | undefined } | undefined;

  const server = http2.createServer({
    settings: {
      maxConcurrentStreams: limits.maxConcurrentStreams ?? 100,
      maxHeaderListSize: limits.maxHeaderListBytes ?? 16 * 1024,
      enablePush: false,
    },
    maxHeaderListPairs: 64,
    // Bytes of frames nghttp2 may hold per connection before it refuses new streams (MB).
    maxSessionMemory: 4,
    maxSessionRejectedStreams: 100,
    maxSessionInvalidFrames: 100,
  });
  // Errors end the session they belong to; nothing here may take the process down.
  server.on('sessionError', () => {});

  server.on('session', (session: http2.ServerHttp2Session) => {
    const st: SessionState = {
      conn: handing?.conn,
      remoteAddress: handing?.remoteAddress ?? session.socket?.remoteAddress ?? '',
      windowStart: 0,
      resets: 0,
      tripped: false,
      open: 0,
    };
    session.on('error', () => {});
    guarded.set(session, () => peerReset(session, st));
    session.setTimeout(idleTimeout, () => {
      if (st.open === 0) session.close();
    });
    // Per session, not the server's 'stream': a stream already reset by the time the event runs
    // has forgotten its session.
    session.on('stream', (stream: http2.ServerHttp2Stream, h: http2.IncomingHttpHeaders) =>
      onNewStream(session, st, stream, h),
    );
  });

  /** One more stream reset by the client: past the bound in one second, GOAWAY and close. */
  const peerReset = (session: http2.ServerHttp2Session, st: SessionState) => {
    if (st.tripped || session.destroyed) return;
    const now = performance.now();
    if (now - st.windowStart >= 1000) {
      st.windowStart = now;
      st.resets = 0;
    }
    if (++st.resets <= maxResets) return;
    st.tripped = true;
    opts.onRapidReset?.();
    // GOAWAY(ENHANCE_YOUR_CALM) with last stream 0: nghttp2 ignores every stream from here on. The
    // connection is cut a moment later rather than now: closing with the flood unread in the
    // receive queue resets it, and a client that has not read the GOAWAY yet would lose it. No error
    // object: it would be emitted on every stream still open, some of which no listener has seen.
    // Nothing more is read meanwhile: the flood behind the GOAWAY costs no parsing (or decryption).
    session.goaway(NGHTTP2_ENHANCE_YOUR_CALM, 0);
    st.conn?.pause();
    setTimeout(
      () => session.destroy(null as unknown as Error, NGHTTP2_ENHANCE_YOUR_CALM),
      GOAWAY_LINGER_MS,
    ).unref();
  };

  const onNewStream = (
    session: http2.ServerHttp2Session,
    st: SessionState,
    stream: http2.ServerHttp2Stream,
    h: http2.IncomingHttpHeaders,
  ) => {
    // HEADERS and RST_STREAM of one read are both processed before this event runs (counted).
    if (stream.closed || stream.destroyed) return;
    if (st.tripped || session.destroyed) return close(stream, NGHTTP2_REFUSED_STREAM);
    st.open++;
    stream.once('close', () => {
      st.open--;
    });
    void onStream(stream, headOf(stream, h, st.remoteAddress));
  };

  async function onStream(stream: http2.ServerHttp2Stream, head: RequestHead): Promise<void> {
    const headOnly = head.method === 'HEAD';
    const answer = (r: IngestResponse) => respond(stream, r, headOnly);
    stream.setTimeout(requestTimeout, () => {
      if (!stream.headersSent) answer(errorResponse(errors.requestTimeout('request not received in time')));
      else close(stream, NGHTTP2_NO_ERROR);
    });
    await serveExchange(handler, head, hardMax, {
      body: stream,
      // A body not read to its end is stopped by the reset `respond` sends once the answer is out.
      answer,
      gone: () => stream.closed || stream.destroyed,
    });
  }

  return {
    server,
    serve(conn, remoteAddress) {
      handing = { conn, remoteAddress };
      try {
        server.emit('connection', conn);
      } finally {
        handing = undefined;
      }
    },
  };
}

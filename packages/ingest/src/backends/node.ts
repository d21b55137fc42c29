import http from 'node:http';
import type { Socket } from 'node:net';
import type { IngestResponse, IngestServer, IngestServerOptions, RequestHead } from '../server.ts';

/** node:http specifics on top of the shared IngestServerOptions. */
export interface NodeServerOptions extends IngestServerOptions {
  /** Idle time before a keep-alive connection is closed. Default 5 s. */
  keepAliveTimeoutMs?: number;
  /** Largest request line + headers. Default 16 KiB. */
  maxHeaderBytes?: number;
  /**
   * After answering a request whose body was not read (413, or any refusal decided on the
   * headers), keep reading and discarding for up to this long before closing, so the client reads
   * the answer instead of a reset. Default 2 s.
   */
  lingerMs?: number;
  /** ... and for at most this many bytes (discarded bytes still cost reads and garbage). Default 256 KiB. */
  lingerBytes?: number;
  /** How long close() lets in-flight requests finish before cutting them. Default 5 s. */
  closeGraceMs?: number;
  /**
   * Unsent output a connection may hold before it is no longer read (resumed on 'drain'). Default
   * 64 KiB, the io_uring backend's bound.
   */
  maxUnsentBytes?: number;
  /**
   * Requests one connection may have waiting for their answers to be written (pipelined behind an
   * unanswered one). node:http parses a whole read (up to 64 KiB, thousands of tiny pipelined
   * requests) before it can stop, so past this the connection is closed. Default 128.
   */
  maxPipelined?: number;
}

const JSON_TYPE = 'application/json';

/** Per connection: requests whose answer is not yet handed to the socket. */
const outstanding = new WeakMap<Socket, number>();
/** Sockets answered with `connection: close`: requests pipelined behind that answer are dropped unread. */
const closing = new WeakSet<Socket>();

function headOf(req: http.IncomingMessage): RequestHead {
  const headers: Record<string, string> = {};
  for (const [k, v] of Object.entries(req.headers)) {
    if (v === undefined) continue;
    headers[k] = Array.isArray(v) ? v.join(', ') : v;
  }
  const cl = headers['content-length'];
  const contentLength =
    cl !== undefined && headers['transfer-encoding'] === undefined && /^\d+$/.test(cl)
      ? Number(cl)
      : undefined;
  return {
    method: req.method ?? 'GET',
    url: req.url ?? '/',
    headers,
    remoteAddress: req.socket.remoteAddress ?? '',
    contentLength,
  };
}

/**
 * Closes the way nginx's lingering_close does: half-close our side after the answer, read and drop
 * what the client still sends for up to `ms`, then destroy. Closing at once with unread bytes in the
 * receive queue makes the kernel send RST, and a client that is still writing its body would see
 * ECONNRESET instead of our 413. Replaces node:http's destroySoon for this one socket.
 */
function lingerOnClose(socket: Socket, ms: number, maxBytes: number): void {
  (socket as Socket & { destroySoon(): void }).destroySoon = () => {
    if (socket.destroyed) return;
    const timer = setTimeout(() => socket.destroy(), ms);
    timer.unref();
    let drained = 0;
    socket.on('data', (d: Buffer) => {
      drained += d.length;
      if (drained > maxBytes) socket.destroy();
    });
    socket.once('close', () => clearTimeout(timer));
    socket.once('end', () => socket.destroy());
    socket.end();
    socket.resume();
  };
}

function send(res: http.ServerResponse, r: IngestResponse, close: boolean): void {
  if (res.headersSent || res.destroyed) return;
  const body = r.body === undefined ? '' : JSON.stringify(r.body);
  const headers: Record<string, string | number> = {
    'content-type': JSON_TYPE,
    'content-length': Buffer.byteLength(body),
    ...r.headers,
  };
  if (close || r.close) {
    headers.connection = 'close';
    closing.add(res.req.socket);
  }
  res.writeHead(r.status, headers);
  res.end(body);
}

/**
 * The node:http ingest backend. Slowloris guards are node's own: `headersTimeout` for the request
 * line and headers, `requestTimeout` for the whole request (408 and close), checked every
 * `connectionsCheckingInterval`, which is scaled to the timeouts so short test timeouts bite on time.
 * The body is never buffered here: each chunk goes to the pipeline's sink as it arrives (the sink
 * hashes and copies it synchronously, so the socket is read no faster than we process it).
 */
export function createNodeServer(opts: NodeServerOptions): IngestServer {
  const { handler } = opts;
  const headersTimeout = opts.headersTimeoutMs ?? 10_000;
  // node requires requestTimeout >= headersTimeout (0 would disable it: never).
  const requestTimeout = Math.max(opts.requestTimeoutMs ?? 30_000, headersTimeout);
  const hardMax = opts.maxBodyBytes ?? Number.POSITIVE_INFINITY;
  const lingerMs = opts.lingerMs ?? 2000;
  const lingerBytes = opts.lingerBytes ?? 256 * 1024;
  const maxUnsent = opts.maxUnsentBytes ?? 64 * 1024;
  const maxPipelined = opts.maxPipelined ?? 128;

  const server = http.createServer(
    {
      headersTimeout,
      requestTimeout,
      connectionsCheckingInterval: Math.max(25, Math.min(1000, Math.floor(headersTimeout / 4))),
      keepAlive: true,
      keepAliveTimeout: opts.keepAliveTimeoutMs ?? 5000,
      maxHeaderSize: opts.maxHeaderBytes ?? 16 * 1024,
    },
    (req, res) => {
      // A client that pipelines requests and never reads the answers makes us parse, answer and
      // keep answers without end (issue 15). node:http stops reading once the socket's buffer is
      // over its high-water mark, but only after the read in hand is parsed; so bound what waits.
      const socket = req.socket;
      const n = (outstanding.get(socket) ?? 0) + 1;
      if (socket.destroyed || closing.has(socket)) return;
      if (n > maxPipelined) {
        socket.destroy();
        return;
      }
      outstanding.set(socket, n);
      let counted = true;
      const done = () => {
        if (!counted) return;
        counted = false;
        outstanding.set(socket, (outstanding.get(socket) ?? 1) - 1);
        if (socket.writableLength > maxUnsent && !socket.isPaused()) {
          socket.pause();
          socket.once('drain', () => socket.resume());
        }
      };
      res.once('finish', done);
      res.once('close', done);
      void onRequest(req, res);
    },
  );
  // A client error (bad framing, header overflow, timeout) answers and closes; never throws.
  server.on('clientError', (err: NodeJS.ErrnoException, socket: Socket) => {
    if (!socket.writable || socket.destroyed) return void socket.destroy();
    const status =
      err.code === 'HPE_HEADER_OVERFLOW' ? 431 : err.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? 408 : 400;
    const text = http.STATUS_CODES[status] ?? 'Bad Request';
    socket.end(`HTTP/1.1 ${status} ${text}\r\nconnection: close\r\ncontent-length: 0\r\n\r\n`);
    socket.destroy();
  });

  async function onRequest(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const head = headOf(req);
    const bodyPending =
      head.contentLength === undefined
        ? head.headers['transfer-encoding'] !== undefined
        : head.contentLength > 0;
    const refuseEarly = (r: IngestResponse) => {
      // The body was not read: close after answering rather than read it all for keep-alive.
      if (bodyPending) lingerOnClose(req.socket, lingerMs, lingerBytes);
      send(res, r, bodyPending);
    };
    if (head.contentLength !== undefined && head.contentLength > hardMax) {
      return refuseEarly({
        status: 413,
        body: { error: { code: 'payload_too_large', message: `body over ${hardMax} bytes` } },
      });
    }
    let decision: Awaited<ReturnType<typeof handler.begin>>;
    try {
      decision = await handler.begin(head);
    } catch {
      // The pipeline answers its own failures; this is a bug, answered honestly.
      return refuseEarly({ status: 500, body: { error: { code: 'internal', message: 'ingest failed' } } });
    }
    if ('reject' in decision) return refuseEarly(decision.reject);
    if (req.destroyed) return decision.accept.abort('client_gone');

    const sink = decision.accept;
    const limit = Math.min(sink.maxBodyBytes, hardMax);
    let received = 0;
    let finished = false;
    const onData = (chunk: Buffer) => {
      if (finished) return;
      received += chunk.length;
      if (received > limit) {
        // Never truncate: the request is refused whole and the connection closed.
        finished = true;
        req.off('data', onData);
        sink.abort('too_large');
        lingerOnClose(req.socket, lingerMs, lingerBytes);
        send(
          res,
          {
            status: 413,
            body: { error: { code: 'payload_too_large', message: `body over ${limit} bytes` } },
          },
          true,
        );
        return;
      }
      sink.write(chunk);
    };
    req.on('data', onData);
    req.once('end', () => {
      if (finished) return;
      finished = true;
      sink.end().then(
        (r) => send(res, r, false),
        () =>
          send(res, { status: 500, body: { error: { code: 'internal', message: 'ingest failed' } } }, true),
      );
    });
    req.once('close', () => {
      // 'close' also follows a normal 'end'; only an incomplete body means the client went away
      // (or node's requestTimeout cut it).
      if (finished) return;
      finished = true;
      sink.abort(req.complete ? 'closed' : 'client_gone');
    });
    req.once('error', () => {
      if (finished) return;
      finished = true;
      sink.abort('error');
    });
  }

  return {
    backend: 'node',
    listen() {
      return new Promise((resolve, reject) => {
        server.once('error', reject);
        server.listen({ port: opts.port, host: opts.host, reusePort: opts.reusePort ?? false }, () => {
          server.off('error', reject);
          const addr = server.address();
          resolve({ port: typeof addr === 'object' && addr ? addr.port : opts.port });
        });
      });
    },
    close() {
      return new Promise((resolve) => {
        if (!server.listening) return resolve();
        const timer = setTimeout(() => server.closeAllConnections(), opts.closeGraceMs ?? 5000);
        timer.unref();
        server.close(() => {
          clearTimeout(timer);
          resolve();
        });
        server.closeIdleConnections();
      });
    },
  };
}

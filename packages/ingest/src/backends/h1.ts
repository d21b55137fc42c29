/**
 * HTTP/1.1 for the front door (./front.ts): a node:http server that never listens itself; the front
 * door hands it connections (plain, or TLS with ALPN http/1.1) once their first bytes are known.
 */
import http from 'node:http';
import type { Socket } from 'node:net';
import { errors } from '@spillway/shared';
import { errorResponse } from '../errors.ts';
import type { IngestHandler, IngestResponse, RequestHead } from '../server.ts';
import { serveExchange } from './exchange.ts';

export interface Http1Options {
  handler: IngestHandler;
  maxBodyBytes?: number;
  headersTimeoutMs?: number;
  requestTimeoutMs?: number;
  keepAliveTimeoutMs?: number;
  maxHeaderBytes?: number;
  lingerMs?: number;
  lingerBytes?: number;
  maxUnsentBytes?: number;
  maxPipelined?: number;
  /** True once the server is draining: every answer from then on closes its connection. */
  draining: () => boolean;
}

const JSON_TYPE = 'application/json';

/** Per connection: requests whose answer is not yet handed to the socket. */
const outstanding = new WeakMap<Socket, number>();
/** Sockets answered with `connection: close`: requests pipelined behind that answer are dropped unread. */
const closing = new WeakSet<Socket>();

/** Bytes node:http parses at a time (about 290 pipelined `GET /` heads); see sliceReads. */
const READ_SLICE = 8 * 1024;

/**
 * node:http parses all that one read brings (64 KiB: ~2,300 pipelined `GET /` heads) before any
 * handler can stop it; a client that pipelines and never reads the answers so made every read
 * cost thousands of request and response objects, and V8 kept the heap they grew (issue 15). This
 * feeds node:http's own 'data' listener READ_SLICE bytes at a time and stops between slices once
 * the socket is paused (its answers wait unsent: the handler or node:http paused it) or destroyed
 * (too many pipelined); the rest waits for the 'resume'. The socket stays the real one (a wrapping
 * Duplex broke the SIGUSR2 handover). Returns false when node:http's listener is not where this
 * Node puts it (then reads are not sliced; the test of this module fails).
 */
export function sliceReads(socket: Socket): boolean {
  const listeners = socket.listeners('data');
  const nodeOnData = listeners.at(-1) as ((d: Buffer) => void) | undefined;
  if (listeners.length !== 1 || nodeOnData?.name !== 'bound socketOnData') return false;
  socket.removeListener('data', nodeOnData);
  let held: Buffer | undefined;
  const feed = (data: Buffer) => {
    let d = data;
    if (held) {
      d = Buffer.concat([held, d]);
      held = undefined;
    }
    for (let off = 0; off < d.length; ) {
      if (socket.destroyed) return;
      if (socket.isPaused()) {
        held = d.subarray(off);
        return;
      }
      const end = Math.min(d.length, off + READ_SLICE);
      nodeOnData(off === 0 && end === d.length ? d : d.subarray(off, end));
      off = end;
    }
  };
  socket.on('data', feed);
  // 'resume' comes just before the stream flows again: what was held goes first, in order.
  socket.on('resume', () => {
    if (held) feed(Buffer.alloc(0));
  });
  return true;
}

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

/**
 * The node:http half of the ingest backend. Slowloris guards are node's own: `headersTimeout` for
 * the request line and headers, `requestTimeout` for the whole request (408 and close), checked
 * every `connectionsCheckingInterval`, which is scaled to the timeouts so short test timeouts bite
 * on time. The body is never buffered here: each chunk goes to the pipeline's sink as it arrives
 * (the sink hashes and copies it synchronously, so the socket is read no faster than we process it).
 */
export function createHttp1(opts: Http1Options): http.Server {
  const { handler, draining } = opts;
  const headersTimeout = opts.headersTimeoutMs ?? 10_000;
  // node requires requestTimeout >= headersTimeout (0 would disable it: never).
  const requestTimeout = Math.max(opts.requestTimeoutMs ?? 30_000, headersTimeout);
  const hardMax = opts.maxBodyBytes ?? Number.POSITIVE_INFINITY;
  const lingerMs = opts.lingerMs ?? 2000;
  const lingerBytes = opts.lingerBytes ?? 256 * 1024;
  const maxUnsent = opts.maxUnsentBytes ?? 64 * 1024;
  const maxPipelined = opts.maxPipelined ?? 128;

  const send = (res: http.ServerResponse, r: IngestResponse, close: boolean): void => {
    if (res.headersSent || res.destroyed) return;
    const body = r.body === undefined ? '' : JSON.stringify(r.body);
    const headers: Record<string, string | number> = {
      'content-type': JSON_TYPE,
      'content-length': Buffer.byteLength(body),
      ...r.headers,
    };
    if (close || r.close || draining()) {
      headers.connection = 'close';
      closing.add(res.req.socket);
    }
    res.writeHead(r.status, headers);
    res.end(body);
  };

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
  // After node:http's own connection listener, which attached its 'data' listener.
  server.on('connection', (socket: Socket) => void sliceReads(socket));
  // node:http tracks connections for its header and request timeouts from 'listening' on; this
  // server never listens (the front door hands it its connections), so start the tracking here.
  server.emit('listening');
  // A client error (bad framing, header overflow, timeout) answers and closes; never throws.
  server.on('clientError', (err: NodeJS.ErrnoException, socket: Socket) => {
    if (!socket.writable || socket.destroyed) return void socket.destroy();
    const r = errorResponse(
      err.code === 'HPE_HEADER_OVERFLOW'
        ? errors.headersTooLarge('request head too large')
        : err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
          ? errors.requestTimeout('request head not received in time')
          : errors.badRequest('malformed request head'),
    );
    const text = http.STATUS_CODES[r.status] ?? 'Bad Request';
    const body = JSON.stringify(r.body);
    socket.end(
      `HTTP/1.1 ${r.status} ${text}\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
    );
    socket.destroy();
  });

  function onRequest(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const head = headOf(req);
    const bodyPending =
      head.contentLength === undefined
        ? head.headers['transfer-encoding'] !== undefined
        : head.contentLength > 0;
    return serveExchange(handler, head, hardMax, {
      body: req,
      answer(r, kind) {
        if (kind === 'unread') {
          // The body was not read (all): close after answering rather than read it for keep-alive.
          if (bodyPending) lingerOnClose(req.socket, lingerMs, lingerBytes);
          send(res, r, bodyPending);
        } else send(res, r, kind === 'failed');
      },
      gone: () => req.destroyed,
      // 'close' before the end: the client went away, or node's requestTimeout cut it.
      closedReason: () => (req.complete ? 'closed' : 'client_gone'),
    });
  }

  return server;
}

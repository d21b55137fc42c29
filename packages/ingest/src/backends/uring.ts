/**
 * The `uring` IngestServer: sockets and HTTP/1.1 framing live in the io_uring addon (its own
 * thread); this file maps its event batches onto the IngestHandler and sends the answers back.
 */

import { lookup } from 'node:dns/promises';
import { closeSync, readFileSync } from 'node:fs';
import { STATUS_CODES } from 'node:http';
import net, { isIP } from 'node:net';
import { definedOf, errors } from '@spillway/shared';
import { errorResponse } from '../errors.ts';
import type {
  BodySink,
  CloseOptions,
  HeadDecision,
  IngestResponse,
  IngestServer,
  RequestHead,
  RouteSpec,
  TlsCredentials,
} from '../server.ts';
import { createFrontDoor, type FrontDoor, type FrontDoorOptions } from './front.ts';
import {
  EV_ABORT,
  EV_BODY,
  EV_CLOSED,
  EV_END,
  EV_HANDOFF,
  EV_HEAD,
  NATIVE_KINDS,
  type NativeEvent,
  NativeServer,
  type NativeVerify,
  nativeProbe,
} from './uring-native.ts';

/**
 * Tuning beyond the shared options; defaults suit the ingest role. (The FrontDoorOptions tuning —
 * linger, pipelining — applies to the connections handed to the node half.)
 */
export interface UringTuning {
  /** Request line + headers limit (431 past it). Default 16 KiB. */
  maxHeadBytes?: number;
  /** Header field count limit (431 past it). Default 64. */
  maxHeaders?: number;
  /** Idle keep-alive connections are closed after this. Default 5000. */
  keepAliveTimeoutMs?: number;
  /** How long close() lets in-flight requests finish. Default 5000. */
  closeGraceMs?: number;
  /**
   * A complete request the handler has not answered within this gets 503 + Retry-After and the
   * connection is closed (its sink is aborted), so a lost answer cannot pin a connection until
   * shutdown. Counted from the last body byte. Default 60000.
   */
  answerTimeoutMs?: number;
  maxConnections?: number;
  /** Provided-buffer ring: buffer count (power of two) and size. Defaults 1024 × 16 KiB. */
  bufCount?: number;
  bufSize?: number;
}

export interface UringIngestServer extends IngestServer {
  readonly backend: 'uring';
  /**
   * Per-path body caps (exact path, query ignored), enforced natively before any body byte is handed
   * up: a Content-Length over the cap gets 413 at once, a chunked body at the first byte past it.
   * The global maxBodyBytes still applies on top. Replaces the previous table.
   */
  setRoutes(routes: ReadonlyMap<string, number | RouteSpec> | Record<string, number | RouteSpec>): void;
}

/** Whether this kernel/sandbox lets the addon run; the reason names what failed. */
export function probeUring(): { ok: true } | { ok: false; reason: string } {
  try {
    if (readFileSync('/proc/sys/kernel/io_uring_disabled', 'utf8').trim() === '2') {
      return { ok: false, reason: 'kernel.io_uring_disabled = 2' };
    }
  } catch {
    // Older kernels have no such sysctl; the real probe below decides.
  }
  return nativeProbe();
}

export function createUringServer(opts: FrontDoorOptions & UringTuning): UringIngestServer {
  return new UringServer(opts);
}

interface Req {
  id: number;
  head: RequestHead;
  sink: BodySink | undefined;
  pending: Buffer[];
  received: number;
  ended: boolean;
  done: boolean;
  closeAfter: boolean;
  hasBody: boolean;
  /** END's verdict: 1 the ring thread's HMAC matched, 2 it did not, 0/absent not verified there. */
  verdict?: number;
}

/** The kind and secrets a key set id stands for (RequestHead.nativeMac). */
type VerifyKeys = { kind: string; secrets: readonly string[] };

const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
const FORBIDDEN_VALUE = /[\0\r\n]/;
/** Framing headers belong to the backend; a handler cannot override them. */
const RESERVED = new Set(['content-length', 'content-type', 'transfer-encoding', 'connection']);

/** A response to HEAD carries the headers a GET would get, never the body (RFC 9110 §9.3.2). */
function encodeResponse(res: IngestResponse, close: boolean, headOnly: boolean): Buffer {
  const body = res.body === undefined ? '' : JSON.stringify(res.body);
  let head = `HTTP/1.1 ${res.status} ${STATUS_CODES[res.status] ?? 'Unknown'}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n`;
  if (res.headers) {
    for (const [name, value] of Object.entries(res.headers)) {
      const v = String(value);
      if (!TOKEN.test(name) || FORBIDDEN_VALUE.test(v) || RESERVED.has(name.toLowerCase())) continue;
      head += `${name}: ${v}\r\n`;
    }
  }
  if (close) head += 'connection: close\r\n';
  if (headOnly) return Buffer.from(`${head}\r\n`, 'latin1');
  return Buffer.concat([Buffer.from(`${head}\r\n`, 'latin1'), Buffer.from(body, 'utf8')]);
}

/** Abort is cleanup; a throwing sink must not take the batch (and the other requests in it) down. */
function safeAbort(sink: BodySink, reason: string): void {
  try {
    sink.abort(reason);
  } catch {
    // nothing left to answer: the request is already finished from the client's point of view
  }
}

function wantsClose(headers: Record<string, string>): boolean {
  const c = headers.connection;
  return c !== undefined && /(^|,)\s*close\s*(,|$)/i.test(c);
}

class UringServer implements UringIngestServer {
  readonly backend = 'uring' as const;
  readonly #opts: FrontDoorOptions & UringTuning;
  readonly #reqs = new Map<number, Req>();
  #native: NativeServer | undefined;
  #routes: [string[], number[], (NativeVerify | null)[]] | undefined;
  #closing: Promise<void> | undefined;
  #resolveClosed: (() => void) | undefined;
  /** The node half: TLS, HTTP/2 and whatever is not HTTP/1.1 in the clear, handed off the ring. */
  #door: FrontDoor | undefined;
  /** Closing as a handover: every answer on the ring says `connection: close`. */
  #draining = false;

  constructor(opts: FrontDoorOptions & UringTuning) {
    this.#opts = opts;
  }

  async listen(): Promise<{ port: number }> {
    if (this.#native) throw new Error('uring ingest server: listen() called twice');
    const o = this.#opts;
    const host = isIP(o.host) ? o.host : (await lookup(o.host)).address;
    const closed = new Promise<void>((resolve) => {
      this.#resolveClosed = resolve;
    });
    this.#closing = undefined;
    this.#draining = false;
    this.#door = createFrontDoor(o);
    const native = new NativeServer(
      {
        host,
        port: o.port,
        reusePort: o.reusePort === true,
        handoff: true,
        ...definedOf(o, [
          'listenFd',
          'maxBodyBytes',
          'headersTimeoutMs',
          'requestTimeoutMs',
          'maxHeadBytes',
          'maxHeaders',
          'keepAliveTimeoutMs',
          'maxConnections',
          'bufCount',
          'bufSize',
          'answerTimeoutMs',
        ]),
      },
      (events) => this.#onEvents(events),
    );
    if (this.#routes) native.setRoutes(...this.#routes);
    const port = native.listen();
    this.#native = native;
    this.#closed = closed;
    return { port };
  }

  #closed: Promise<void> | undefined;

  setRoutes(routes: ReadonlyMap<string, number | RouteSpec> | Record<string, number | RouteSpec>): void {
    const entries = routes instanceof Map ? [...routes] : Object.entries(routes);
    const specs = entries.map(([, r]): RouteSpec => (typeof r === 'number' ? { maxBodyBytes: r } : r));
    // Key sets get small ids the ring echoes in each HEAD it verifies. An id keeps its keys while
    // this table or the one before it uses them (a HEAD framed under the old table may still be on
    // its way up); older ones are forgotten.
    const used = new Map<number, VerifyKeys>();
    const verify = specs.map((r): NativeVerify | null => {
      const v = r.verify;
      const kind = v && NATIVE_KINDS[v.kind];
      if (!v || !kind || v.secrets.length === 0 || v.secrets.length > 2) return null;
      const name = `${v.kind}\0${v.secrets.join('\0')}`;
      let id = this.#vsetIds.get(name);
      if (id === undefined) {
        id = ++this.#vsetSeq;
        this.#vsetIds.set(name, id);
      }
      used.set(id, { kind: v.kind, secrets: [...v.secrets] });
      return [id, kind, v.secrets];
    });
    for (const [name, id] of this.#vsetIds)
      if (!used.has(id) && !this.#vsetsNow.has(id)) this.#vsetIds.delete(name);
    this.#vsetsBefore = this.#vsetsNow;
    this.#vsetsNow = used;
    this.#routes = [entries.map(([p]) => p), specs.map((r) => r.maxBodyBytes), verify];
    this.#native?.setRoutes(...this.#routes);
  }

  /** Key sets by id, of this table and of the one before it; ids by `kind\0secret…`. */
  #vsetsNow = new Map<number, VerifyKeys>();
  #vsetsBefore = new Map<number, VerifyKeys>();
  #vsetIds = new Map<string, number>();
  #vsetSeq = 0;

  close(opts?: CloseOptions): Promise<void> {
    if (this.#closing) return this.#closing;
    const native = this.#native;
    if (!native) return Promise.resolve();
    this.#draining = opts?.drain === true;
    native.close(this.#opts.closeGraceMs ?? 5000, this.#draining);
    const door = this.#door?.close(opts) ?? Promise.resolve();
    this.#closing = Promise.all([this.#closed ?? Promise.resolve(), door]).then(() => {
      this.#native = undefined;
    });
    return this.#closing;
  }

  setTlsCredentials(creds: TlsCredentials | (() => TlsCredentials)): void {
    if (!this.#door) throw new Error('uring ingest server: setTlsCredentials before listen()');
    this.#door.setTlsCredentials(creds);
  }

  listenFd(): number | undefined {
    const fd = this.#native?.listenFd() ?? -1;
    return fd >= 0 ? fd : undefined;
  }

  /**
   * A connection that does not speak HTTP/1.1 in the clear, off the ring: TLS (terminated by
   * node:tls; kTLS in the ring was not built, see docs/ingest.md), h2c, or bytes to count and close.
   */
  #handoff(fd: number, initial: Buffer): void {
    const door = this.#door;
    if (!door || (this.#closing && !this.#draining)) {
      closeSync(fd);
      return;
    }
    let socket: net.Socket;
    try {
      socket = new net.Socket({ fd, readable: true, writable: true });
    } catch {
      closeSync(fd);
      return;
    }
    door.accept(socket, initial);
  }

  #onEvents(events: NativeEvent[]): void {
    for (const ev of events) {
      switch (ev[0]) {
        case EV_HEAD: {
          const [, id, method, url, remote, flat, cl, chunked, vset] = ev;
          const headers: Record<string, string> = Object.create(null);
          for (let i = 0; i + 1 < flat.length; i += 2) {
            const name = flat[i]!;
            const value = flat[i + 1]!;
            const prev = headers[name];
            headers[name] = prev === undefined ? value : name === 'set-cookie' ? prev : `${prev}, ${value}`;
          }
          const head: RequestHead = {
            method,
            url,
            headers,
            remoteAddress: remote,
            contentLength: cl >= 0 ? cl : undefined,
          };
          const keys = vset ? (this.#vsetsNow.get(vset) ?? this.#vsetsBefore.get(vset)) : undefined;
          if (keys) head.nativeMac = keys;
          const req: Req = {
            id,
            head,
            sink: undefined,
            pending: [],
            received: 0,
            ended: false,
            done: false,
            closeAfter: wantsClose(headers),
            hasBody: chunked || cl > 0,
          };
          this.#reqs.set(id, req);
          this.#begin(req);
          break;
        }
        case EV_BODY: {
          const req = this.#reqs.get(ev[1]);
          if (!req || req.done) break;
          req.received += ev[2].length;
          if (req.sink) this.#write(req, ev[2]);
          else req.pending.push(ev[2]);
          break;
        }
        case EV_END: {
          const req = this.#reqs.get(ev[1]);
          if (!req || req.done) break;
          req.ended = true;
          req.verdict = ev[2];
          if (req.sink) void this.#finish(req, req.sink);
          break;
        }
        case EV_ABORT: {
          const req = this.#reqs.get(ev[1]);
          if (!req) break;
          req.done = true;
          this.#reqs.delete(req.id);
          if (req.sink) safeAbort(req.sink, ev[2]);
          break;
        }
        case EV_HANDOFF: {
          this.#handoff(ev[2], ev[3]);
          break;
        }
        case EV_CLOSED: {
          for (const req of this.#reqs.values()) {
            req.done = true;
            if (req.sink) safeAbort(req.sink, 'server closed');
          }
          this.#reqs.clear();
          this.#resolveClosed?.();
          break;
        }
      }
    }
  }

  #begin(req: Req): void {
    let decision: HeadDecision | Promise<HeadDecision>;
    try {
      decision = this.#opts.handler.begin(req.head);
    } catch (err) {
      this.#fail(req, err);
      return;
    }
    if (decision instanceof Promise)
      decision.then(
        (d) => this.#decided(req, d),
        (err: unknown) => this.#fail(req, err),
      );
    else this.#decided(req, decision);
  }

  #decided(req: Req, d: HeadDecision): void {
    if ('reject' in d) {
      this.#respond(req, d.reject);
      return;
    }
    const sink = d.accept;
    if (req.done) {
      safeAbort(sink, 'client closed');
      return;
    }
    if (req.head.contentLength !== undefined && req.head.contentLength > sink.maxBodyBytes) {
      this.#tooLarge(req, sink);
      return;
    }
    req.sink = sink;
    // Native sends 100 Continue if the client asked for it, lets a body past its pre-accept window
    // flow, and from now on refuses natively (413 + close) any byte past the sink's cap. A body that
    // is already complete (most webhooks: head and body in one batch) needs none of that, and
    // skipping it saves a command and an eventfd write per request.
    if (!req.ended) this.#native?.continue(req.id, sink.maxBodyBytes);
    const pending = req.pending;
    req.pending = [];
    let seen = 0;
    for (const chunk of pending) {
      seen += chunk.length;
      if (!this.#writeChecked(req, sink, chunk, seen)) return;
    }
    if (req.ended) void this.#finish(req, sink);
  }

  #write(req: Req, chunk: Buffer): void {
    this.#writeChecked(req, req.sink!, chunk, req.received);
  }

  #writeChecked(req: Req, sink: BodySink, chunk: Buffer, total: number): boolean {
    if (total > sink.maxBodyBytes) {
      this.#tooLarge(req, sink);
      return false;
    }
    try {
      // EV_BODY chunks are copies the addon made for this call (napi_create_buffer_copy): handed
      // over as they are (BodySink.write).
      sink.write(chunk);
      return true;
    } catch (err) {
      safeAbort(sink, 'sink write failed');
      this.#fail(req, err);
      return false;
    }
  }

  #tooLarge(req: Req, sink: BodySink): void {
    safeAbort(sink, 'body too large');
    this.#respond(
      req,
      errorResponse(errors.tooLarge(`body exceeds ${sink.maxBodyBytes} bytes`), { close: true }),
    );
  }

  async #finish(req: Req, sink: BodySink): Promise<void> {
    let res: IngestResponse;
    try {
      res = await sink.end(req.verdict === 1 ? true : req.verdict === 2 ? false : undefined);
    } catch (err) {
      this.#fail(req, err);
      return;
    }
    this.#respond(req, res);
  }

  #fail(req: Req, err: unknown): void {
    // A catalog error as it is; anything else is `internal` (its message is not shown).
    this.#respond(req, errorResponse(err, { close: true }));
  }

  #respond(req: Req, res: IngestResponse): void {
    if (req.done) return;
    req.done = true;
    this.#reqs.delete(req.id);
    // Answering before the whole body arrived leaves bytes unread: native closes, so say so. So does
    // a draining server: the client must not send this connection another request.
    const close = res.close === true || req.closeAfter || (req.hasBody && !req.ended) || this.#draining;
    this.#native?.respond(req.id, encodeResponse(res, close, req.head.method === 'HEAD'), close);
  }
}

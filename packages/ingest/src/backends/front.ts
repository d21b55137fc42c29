/**
 * The front door of the ingest port: one port, classified by its first bytes (docs/ingest.md, "One
 * port"). A connection that opens with a TLS ClientHello is terminated here and ALPN picks HTTP/2
 * or HTTP/1.1; the HTTP/2 preface in the clear goes to HTTP/2; a request line goes to HTTP/1.1;
 * anything else is closed and counted by what it looked like. The node backend hands it every
 * connection it accepts; the io_uring backend keeps plain HTTP/1.1 on its ring and hands it the rest.
 */
import { X509Certificate } from 'node:crypto';
import type http from 'node:http';
import type http2 from 'node:http2';
import type net from 'node:net';
import { Duplex } from 'node:stream';
import tls from 'node:tls';
import { definedOf } from '@spillway/shared';
import { ingestMetrics } from '../metrics.ts';
import type { CloseOptions, IngestServerOptions, TlsCredentials } from '../server.ts';
import { type ConnectionClass, classifyFirstBytes } from './classify.ts';
import { createHttp1 } from './h1.ts';
import { createHttp2 } from './h2.ts';

/** node:http tuning on top of the shared IngestServerOptions (both backends' node half). */
export interface FrontDoorOptions extends IngestServerOptions {
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

export interface FrontDoor {
  /**
   * Takes a connection just accepted. `initial`: bytes already read from it (the io_uring ring read
   * them before handing the connection over); they are served as if they had just arrived.
   */
  accept(socket: net.Socket, initial?: Buffer): void;
  /**
   * Replaces the certificate for new handshakes; throws (keeping the old one) if it does not load.
   * A function is called for the credentials (a reload reading files: its failure is counted too).
   */
  setTlsCredentials(creds: TlsCredentials | (() => TlsCredentials)): void;
  /** Resolves once every connection it was given is gone (bounded by closeGraceMs). */
  close(opts?: CloseOptions): Promise<void>;
  /** Connections it holds now. */
  readonly size: number;
}

const ALPN = ['h2', 'http/1.1'];

/**
 * A socket as a plain Duplex, bytes already read and unshifted included. node:http2 reads a
 * net.Socket's handle directly, past its JS buffer, so the preface the classifier read would be
 * lost; behind a Duplex it reads through the stream instead (h2c only: TLS sockets are fresh).
 */
class SocketStream extends Duplex {
  readonly #socket: net.Socket;
  constructor(socket: net.Socket) {
    super({ allowHalfOpen: false });
    this.#socket = socket;
    socket.on('data', (d: Buffer) => {
      if (!this.push(d)) socket.pause();
    });
    socket.once('end', () => this.push(null));
    socket.once('error', (err) => this.destroy(err));
    socket.once('close', () => this.destroy());
  }
  override _read(): void {
    this.#socket.resume();
  }
  override _write(chunk: Buffer, enc: BufferEncoding, cb: (err?: Error | null) => void): void {
    this.#socket.write(chunk, enc, cb);
  }
  override _final(cb: (err?: Error | null) => void): void {
    this.#socket.end(cb);
  }
  override _destroy(err: Error | null, cb: (err?: Error | null) => void): void {
    this.#socket.destroy();
    cb(err);
  }
}

function notAfterSeconds(cert: string | Buffer): number | undefined {
  try {
    return Math.floor(Date.parse(new X509Certificate(cert).validTo) / 1000);
  } catch {
    return undefined;
  }
}

export function createFrontDoor(opts: FrontDoorOptions): FrontDoor {
  const m = ingestMetrics();
  const headersTimeout = opts.headersTimeoutMs ?? 10_000;
  const sockets = new Set<net.Socket>();
  /** Sockets whose first bytes are still awaited. */
  const undecided = new Set<net.Socket>();
  const sessions = new Set<http2.ServerHttp2Session>();
  let closing: Promise<void> | undefined;
  let draining = false;
  /** Set while closing: called when the last connection is gone. */
  let onEmpty: (() => void) | undefined;

  const h1: http.Server = createHttp1({
    handler: opts.handler,
    ...definedOf(opts, [
      'maxBodyBytes',
      'headersTimeoutMs',
      'requestTimeoutMs',
      'keepAliveTimeoutMs',
      'maxHeaderBytes',
      'lingerMs',
      'lingerBytes',
      'maxUnsentBytes',
      'maxPipelined',
    ]),
    draining: () => closing !== undefined,
  });
  const h2 = createHttp2({
    handler: opts.handler,
    ...(opts.http2 && { limits: opts.http2 }),
    ...(opts.maxBodyBytes !== undefined && { maxBodyBytes: opts.maxBodyBytes }),
    ...(opts.requestTimeoutMs !== undefined && { requestTimeoutMs: opts.requestTimeoutMs }),
    ...(opts.keepAliveTimeoutMs !== undefined && { idleTimeoutMs: opts.keepAliveTimeoutMs }),
    onRapidReset: () => m.h2RapidResets.inc(),
  });
  h2.server.on('session', (s: http2.ServerHttp2Session) => {
    sessions.add(s);
    s.once('close', () => sessions.delete(s));
    // A connection handed over while closing gets its GOAWAY at once.
    if (closing) s.close();
  });

  let tlsServer: tls.Server | undefined;
  const setTlsCredentials = (given: TlsCredentials | (() => TlsCredentials)) => {
    let creds: TlsCredentials;
    if (tlsServer) {
      // A reload. setSecureContext builds the new context first: a certificate that does not load
      // throws here and the old one stays in use.
      try {
        creds = typeof given === 'function' ? given() : given;
        tlsServer.setSecureContext({ cert: creds.cert, key: creds.key });
        m.tlsReloads.inc({ outcome: 'ok' });
      } catch (err) {
        m.tlsReloads.inc({ outcome: 'failed' });
        throw err;
      }
    } else {
      creds = typeof given === 'function' ? given() : given;
      tlsServer = tls.createServer({
        cert: creds.cert,
        key: creds.key,
        ALPNProtocols: ALPN,
        minVersion: 'TLSv1.2',
        handshakeTimeout: headersTimeout,
        allowHalfOpen: false,
      });
      tlsServer.on('secureConnection', (t: tls.TLSSocket) => {
        if (t.alpnProtocol === 'h2') {
          m.connections.inc({ class: 'tls_h2' });
          h2.serve(t, t.remoteAddress);
        } else {
          // ALPN http/1.1, or a client that offered no ALPN at all: HTTP/1.1.
          m.connections.inc({ class: 'tls_http1' });
          h1.emit('connection', t);
        }
      });
      tlsServer.on('tlsClientError', (_err: Error, t: tls.TLSSocket) => {
        m.connections.inc({ class: 'tls_failed' });
        t.destroy();
      });
    }
    const notAfter = notAfterSeconds(creds.cert);
    if (notAfter !== undefined) m.tlsCertNotAfter.set(notAfter);
  };
  if (opts.tls) setTlsCredentials(opts.tls);

  /** Unknown bytes: a FIN, not a reset (what was sent is read and dropped for a moment), and a count. */
  const refuse = (socket: net.Socket, cls: ConnectionClass | 'tls_unconfigured' | 'silent') => {
    m.connections.inc({ class: cls });
    const timer = setTimeout(() => socket.destroy(), 1000);
    timer.unref();
    socket.once('close', () => clearTimeout(timer));
    socket.on('data', () => {});
    socket.end();
    socket.resume();
  };

  const route = (socket: net.Socket, cls: ConnectionClass) => {
    switch (cls) {
      case 'http1':
        m.connections.inc({ class: 'http1' });
        h1.emit('connection', socket);
        socket.resume();
        return;
      case 'h2c':
        m.connections.inc({ class: 'h2c' });
        h2.serve(new SocketStream(socket), socket.remoteAddress);
        socket.resume();
        return;
      case 'tls':
        if (!tlsServer) return refuse(socket, 'tls_unconfigured');
        m.connections.inc({ class: 'tls' });
        socket.allowHalfOpen = false;
        tlsServer.emit('connection', socket);
        return;
      default:
        return refuse(socket, cls);
    }
  };

  const accept = (socket: net.Socket, initial?: Buffer) => {
    socket.on('error', () => {});
    if (closing && !draining) return void socket.destroy();
    sockets.add(socket);
    socket.once('close', () => {
      sockets.delete(socket);
      if (sockets.size === 0) onEmpty?.();
    });
    let seen = initial ?? Buffer.alloc(0);
    undecided.add(socket);
    const timer = setTimeout(() => {
      undecided.delete(socket);
      refuse(socket, 'silent');
    }, headersTimeout);
    timer.unref();
    const decide = (): boolean => {
      const cls = classifyFirstBytes(seen);
      if (cls === undefined) return false;
      clearTimeout(timer);
      undecided.delete(socket);
      socket.off('data', onData);
      socket.off('end', onEnd);
      socket.pause();
      if (seen.length) socket.unshift(seen);
      route(socket, cls);
      return true;
    };
    const onData = (d: Buffer) => {
      seen = seen.length ? Buffer.concat([seen, d]) : d;
      decide();
    };
    const onEnd = () => {
      clearTimeout(timer);
      undecided.delete(socket);
      m.connections.inc({ class: 'silent' });
      socket.destroy();
    };
    if (seen.length && decide()) return;
    socket.on('data', onData);
    socket.once('end', onEnd);
  };

  return {
    accept,
    setTlsCredentials,
    get size() {
      return sockets.size;
    },
    close(closeOpts?: CloseOptions) {
      if (closing) return closing;
      draining = closeOpts?.drain === true;
      closing = new Promise<void>((resolve) => {
        // HTTP/2: GOAWAY now; streams in flight finish, the client opens new ones elsewhere.
        for (const s of sessions) s.close();
        if (!draining) {
          // Idle HTTP/1.1 connections go at once; one in the middle of a request answers it with
          // `connection: close`. Draining (a handover), an idle one is left to its keep-alive
          // timeout instead: its client may be sending on it right now.
          h1.closeIdleConnections();
          for (const s of undecided) s.destroy();
        }
        let finished = false;
        const done = () => {
          if (finished) return;
          finished = true;
          clearTimeout(grace);
          h1.close();
          resolve();
        };
        const grace = setTimeout(() => {
          for (const s of sockets) s.destroy();
          for (const s of sessions) s.destroy();
          setImmediate(done);
        }, opts.closeGraceMs ?? 5000);
        grace.unref();
        if (sockets.size === 0) done();
        else onEmpty = done;
      });
      return closing;
    },
  };
}

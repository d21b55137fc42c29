import net from 'node:net';
import type { CloseOptions, IngestServer, TlsCredentials } from '../server.ts';
import { createFrontDoor, type FrontDoorOptions } from './front.ts';

/** node:http specifics on top of the shared IngestServerOptions. */
export type NodeServerOptions = FrontDoorOptions;

/**
 * The node ingest backend: a plain TCP listener in front of the front door (./front.ts), which
 * reads each connection's first bytes and serves it as TLS (ALPN h2 or http/1.1), h2c or
 * HTTP/1.1 with node:tls, node:http2 and node:http.
 */
export function createNodeServer(opts: NodeServerOptions): IngestServer {
  const door = createFrontDoor(opts);
  const listener = net.createServer({ pauseOnConnect: false, noDelay: true }, (socket) =>
    door.accept(socket),
  );
  let closing: Promise<void> | undefined;

  return {
    backend: 'node',
    listen() {
      return new Promise((resolve, reject) => {
        listener.once('error', reject);
        const done = () => {
          listener.off('error', reject);
          const addr = listener.address();
          resolve({ port: typeof addr === 'object' && addr ? addr.port : opts.port });
        };
        if (opts.listenFd !== undefined) listener.listen({ fd: opts.listenFd }, done);
        else listener.listen({ port: opts.port, host: opts.host, reusePort: opts.reusePort ?? false }, done);
      });
    },
    close(closeOpts?: CloseOptions) {
      if (closing) return closing;
      // Stop accepting first: connections still in the kernel's queue stay there for whoever else
      // holds the socket (the successor of a restart), not reset.
      if (listener.listening) listener.close();
      closing = door.close(closeOpts);
      return closing;
    },
    setTlsCredentials(creds: TlsCredentials | (() => TlsCredentials)) {
      door.setTlsCredentials(creds);
    },
    listenFd() {
      const fd = (listener as net.Server & { _handle?: { fd?: number } })._handle?.fd;
      return typeof fd === 'number' && fd >= 0 ? fd : undefined;
    },
  };
}

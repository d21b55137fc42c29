import { createServer } from 'node:net';

/**
 * A free TCP port on 127.0.0.1 (listen(0), then close), for servers that cannot listen(0) and
 * report back: redis-server, a Kafka broker, nginx, a child process's ingest port.
 */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const a = s.address();
      const port = typeof a === 'object' && a ? a.port : 0;
      s.close(() => resolve(port));
    });
  });
}

import { createNodeServer } from '@spillway/ingest';
import { runIngestConformance } from './ingest.ts';

runIngestConformance('node:http', (opts) => createNodeServer(opts));
// One port, every transport providers use: the provider cases over TLS (ALPN http/1.1 and h2) and h2c.
for (const transport of ['tls-http1', 'tls-h2', 'h2c'] as const)
  runIngestConformance('node', (opts) => createNodeServer(opts), { transport });

/**
 * Peer for the backends themselves: Spillway's IngestServer (argv[2] = node | uring) with a handler
 * that reads the body and answers 202 — the raw ack, no verification, no Redis. Forked as its own
 * process like the other peers; sends its port over IPC.
 */
import { createIngestServer, type IngestHandler } from '@spillway/ingest';

const backend = process.argv[2] === 'uring' ? 'uring' : 'node';
const handler: IngestHandler = {
  begin() {
    return {
      accept: {
        maxBodyBytes: 1 << 20,
        write() {},
        async end() {
          return { status: 202, body: { id: 'ack' } };
        },
        abort() {},
      },
    };
  },
};
const server = await createIngestServer(backend, { handler, port: 0, host: '127.0.0.1' });
const { port } = await server.listen();
process.send?.({ port, backend: server.backend });
process.on('disconnect', () => void server.close().finally(() => process.exit(0)));

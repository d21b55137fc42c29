/** The shared ingest conformance suite (./ingest.ts) run against the io_uring backend. */
import { describe, it } from 'vitest';
import { createUringServer, probeUring } from '../../packages/ingest/src/backends/uring.ts';
import { runIngestConformance } from './ingest.ts';

// The uring backend is not behind @spillway/ingest's door as a named export (the door loads it
// lazily so a machine without the addon still imports the package); tests reach it directly.
const probe = probeUring();
if (probe.ok) {
  runIngestConformance('io_uring', (opts) => createUringServer(opts));
} else {
  describe('ingest conformance: io_uring', () => {
    it.skip(`io_uring unavailable here: ${probe.reason}`, () => undefined);
  });
}

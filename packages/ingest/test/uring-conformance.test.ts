/** The shared ingest conformance suite (test/conformance/ingest.ts) run against the io_uring backend. */
import { describe, it } from 'vitest';
import { createUringServer, probeUring } from '../src/backends/uring.ts';
import { runIngestConformance } from '../../../test/conformance/ingest.ts';

const probe = probeUring();
if (probe.ok) {
  runIngestConformance('io_uring', (opts) => createUringServer(opts));
} else {
  describe('ingest conformance: io_uring', () => {
    it.skip(`io_uring unavailable here: ${probe.reason}`, () => undefined);
  });
}

/** The shared ingest conformance suite (./ingest.ts) run against the io_uring backend. */
import { describe, expect, it } from 'vitest';
import { createUringServer, probeUring } from '../../packages/ingest/src/backends/uring.ts';
import { runIngestConformance } from './ingest.ts';

// The uring backend is not behind @spillway/ingest's door as a named export (the door loads it
// lazily so a machine without the addon still imports the package); tests reach it directly.
const probe = probeUring();

describe('io_uring backend availability', () => {
  // The uring suites below (and packages/ingest/test/uring-*) only run where the probe passes; this
  // test makes a machine where it does not fail loudly instead of skipping them quietly.
  // SPILLWAY_ALLOW_NO_URING=1 is the explicit opt-out for kernels that block io_uring.
  it('the addon is built and the kernel allows io_uring', () => {
    if (process.env.SPILLWAY_ALLOW_NO_URING === '1') return;
    expect(probe.ok ? 'ok' : probe.reason).toBe('ok');
  });
});

if (probe.ok) {
  // In the clear, the ring thread checks signatures itself (its route table carries the keys).
  runIngestConformance('io_uring', (opts) => createUringServer(opts), { ringVerifies: true });
  // TLS and h2c connections leave the ring for the node half (docs/ingest.md, "One port").
  for (const transport of ['tls-http1', 'tls-h2', 'h2c'] as const)
    runIngestConformance('io_uring', (opts) => createUringServer(opts), { transport });
}

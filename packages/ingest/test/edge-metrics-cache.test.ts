import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { Registry } from 'prom-client';
import { afterAll, describe, expect, it } from 'vitest';

/**
 * Each /metrics scrape used to start the eBPF loader (a root-capable process) once (issue 15); the
 * reading is now reused for a few seconds. The real loader runs here, through a wrapper that counts
 * its runs; the edge module is imported after SPILLWAY_EDGE_LOADER points at the wrapper.
 */
const REAL_LOADER = resolve(import.meta.dirname, '../../../bpf/.build/spillway-edge');
const dir = mkdtempSync(join(tmpdir(), 'spw-edge-cache-'));
const count = join(dir, 'runs');
const wrapper = join(dir, 'loader.sh');
writeFileSync(wrapper, `#!/bin/sh\necho run >> '${count}'\nexec '${REAL_LOADER}' "$@"\n`);
chmodSync(wrapper, 0o755);
process.env.SPILLWAY_EDGE_LOADER = wrapper;

const runs = () => (existsSync(count) ? readFileSync(count, 'utf8').trim().split('\n').length : 0);

afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('kernel edge metrics on /metrics', () => {
  it('the loader is built (bpf/build.sh)', () => {
    expect(existsSync(REAL_LOADER)).toBe(true);
  });

  it('scrapes within cacheMs share one loader run; a scrape after it runs the loader again', async () => {
    const { registerKernelDropMetrics } = await import('../src/edge.ts');
    const reg = new Registry();
    // A pin root with nothing pinned: the loader still runs and answers (netstat counters only).
    registerKernelDropMetrics(reg, { pinRoot: join(dir, 'pins'), cacheMs: 1000 });
    for (let i = 0; i < 5; i++) expect(await reg.metrics()).toContain('spillway_listen_overflows_total');
    expect(runs()).toBe(1);
    await new Promise((r) => setTimeout(r, 1100));
    await reg.metrics();
    expect(runs()).toBe(2);
  });
});

import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { createKeys } from '@spillway/shared';
import { describe, expect, it } from 'vitest';
import { testEnv } from '../../../test/helpers/env.ts';
import { waitFor } from '../../../test/helpers/wait.ts';

const WORKER = fileURLToPath(new URL('./fixtures/lease-worker.ts', import.meta.url));

interface Line {
  t: 'lease' | 'use' | 'stats';
  at: number;
  granted?: number;
  held?: number;
  redisCalls?: number;
  used?: number;
}

describe('LeasedLimiter across 3 worker processes', () => {
  // The contract test of issue 5: slow by nature (1,000 tokens at 50/s ≈ 20 s).
  it('1,000 deliveries at 50/s burst 10 take ≥ (1000 − 10 − leases)/50 s; no 2 s window exceeds limit + outstanding leases', {
    timeout: 60_000,
  }, async () => {
    const env = testEnv();
    const keys = createKeys(env.SPILLWAY_PREFIX!);
    const RATE = 50;
    const BURST = 10;
    const TOTAL = 1000;
    const common = {
      ...env,
      PATH: process.env.PATH ?? '',
      KEY: keys.rate('acme', 'ep:hot'),
      COUNTER: `${keys.rate('acme', 'ep:hot')}:test-counter`,
      TOTAL: String(TOTAL),
      RATE: String(RATE),
      BURST: String(BURST),
    };
    const children = Array.from({ length: 3 }, () => {
      const child = spawn(process.execPath, [WORKER], { env: common, stdio: ['pipe', 'pipe', 'pipe'] });
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (d) => {
        stdout += d;
      });
      child.stderr.on('data', (d) => {
        stderr += d;
      });
      const exited = new Promise<number | null>((resolve) => child.on('exit', resolve));
      return { child, exited, out: () => stdout, err: () => stderr };
    });
    // Wait until each process has loaded and connected, then start all three together.
    await waitFor(() => children.every((c) => c.err().includes('ready')), 'every worker connected', 30_000);
    const t0 = Date.now();
    for (const c of children) c.child.stdin.end('GO\n');
    const codes = await Promise.all(children.map((c) => c.exited));
    for (const [i, c] of children.entries()) expect(codes[i], c.err()).toBe(0);

    const perWorker = children.map((c) =>
      c
        .out()
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as Line),
    );
    const uses = perWorker
      .flatMap((ls) => ls.filter((l) => l.t === 'use').map((l) => l.at))
      .sort((a, b) => a - b);
    expect(uses).toHaveLength(TOTAL);
    // Outstanding-lease bound: the most tokens each worker ever held at once, summed over workers.
    const leaseBound = perWorker.reduce(
      (sum, ls) => sum + Math.max(0, ...ls.filter((l) => l.t === 'lease').map((l) => l.held ?? 0)),
      0,
    );
    const elapsedS = (uses[uses.length - 1]! - t0) / 1000;
    const minS = (TOTAL - BURST - leaseBound) / RATE;
    // Any 2 s window: the bucket allows burst + 2 s of rate; leases add at most what was outstanding.
    let worst = 0;
    for (let i = 0, j = 0; i < uses.length; i++) {
      while (uses[j]! < uses[i]! - 2000) j++;
      worst = Math.max(worst, i - j + 1);
    }
    const windowBound = RATE * 2 + BURST + leaseBound;
    const stats = perWorker.map((ls) => ls.find((l) => l.t === 'stats')!);
    const calls = stats.reduce((a, s) => a + (s.redisCalls ?? 0), 0);
    console.log(
      `3 workers, ${TOTAL} at ${RATE}/s burst ${BURST}: ${elapsedS.toFixed(2)} s (min ${minS.toFixed(2)} s), ` +
        `worst 2 s window ${worst} (bound ${windowBound} = ${RATE * 2} + ${BURST} + leases ${leaseBound}), ${calls} Redis calls (${(calls / TOTAL).toFixed(3)}/delivery)`,
    );
    expect(elapsedS).toBeGreaterThanOrEqual(minS);
    expect(worst).toBeLessThanOrEqual(windowBound);
    // Sanity that the bound is meaningful: the lease bound stays small next to the rate.
    expect(leaseBound).toBeLessThanOrEqual(BURST * 3);
  });
});

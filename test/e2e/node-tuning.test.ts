import { readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { describe, expect, it } from 'vitest';
import { workerProcessFixture } from '../helpers/router-fixtures.ts';

/**
 * `spillway start --role worker` re-executes itself once with its V8 tuning (docs/operations.md,
 * "Worker memory"): the semi-space, the heap growth, and a V8 thread pool of cores − 1 (1 to 4), so
 * V8's background threads do not take the core the receiver, Redis and Kafka need. A flag given
 * explicitly wins.
 */
const argsOf = (pid: number) => readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');

describe('node tuning of spillway start', () => {
  const f = workerProcessFixture();
  const given = workerProcessFixture({ NODE_OPTIONS: '--v8-pool-size=3' });

  it('runs the worker with the V8 pool sized to the machine, and the memory flags', async () => {
    const w = await f.startWorker();
    const args = argsOf(w.child.pid!);
    const pool = Math.min(4, Math.max(1, availableParallelism() - 1));
    expect(args).toContain(`--v8-pool-size=${pool}`);
    expect(args).toContain('--max-semi-space-size=16');
    expect(args).toContain('--heap-growing-percent=50');
    w.child.kill('SIGTERM');
    await w.exited;
  });

  it('keeps a pool size given in NODE_OPTIONS (the re-exec adds no second one)', async () => {
    const w = await given.startWorker();
    const args = argsOf(w.child.pid!);
    expect(args.filter((a) => a.startsWith('--v8-pool-size'))).toEqual([]);
    expect(readFileSync(`/proc/${w.child.pid}/environ`, 'utf8')).toContain('NODE_OPTIONS=--v8-pool-size=3');
    w.child.kill('SIGTERM');
    await w.exited;
  });
});

#!/usr/bin/env node
// Spillway runs its TypeScript sources directly (Node >= 24 strips types), so there is no build.
import { availableParallelism } from 'node:os';

const major = Number(process.versions.node.split('.')[0]);
if (major < 24) {
  process.stderr.write(
    `spillway: Node ${process.versions.node} is too old; Spillway needs Node >= 24 (source infra/local/env.sh)\n`,
  );
  process.exit(1);
}
// kafkajs 2.2 schedules some request-queue timers with a negative delay, which Node >= 23 reports
// as a TimeoutNegativeWarning on every start (Node treats the delay as 1 ms: harmless). Drop that
// one warning; every other still prints.
const emitWarning = process.emitWarning;
process.emitWarning = (warning, ...rest) => {
  const type = typeof rest[0] === 'string' ? rest[0] : rest[0]?.type;
  if (type === 'TimeoutNegativeWarning' || warning?.name === 'TimeoutNegativeWarning') return;
  return emitWarning.call(process, warning, ...rest);
};
// Memory tuning for the roles that run a worker or face the internet (`start`, role worker, ingest
// or all; see docs/operations.md, "Worker memory"; for ingest, docs/ingest.md "Holding the door"). V8's defaults let a busy worker's young generation commit 128 MiB and its old
// space grow to ~4× the live heap before a full GC, and RSS keeps that high-water mark: with a
// spilled backlog the worker sat at ~700-1000 MiB RSS over a ~100 MiB live heap. A 16 MiB
// semi-space, a 1.5× old-space growing factor and two malloc arenas roughly halve that. The
// flags must be set at startup, so the process re-executes itself once (process.execve keeps the
// pid, so supervisors and signals are unaffected). Flags or MALLOC_ARENA_MAX given explicitly
// (command line, NODE_OPTIONS, env) win; SPILLWAY_NODE_TUNING=0 turns this off.
const argv = process.argv.slice(2);
const roleArg = argv.findIndex((a) => a === '--role' || a.startsWith('--role='));
const role =
  roleArg < 0 ? 'all' : argv[roleArg].includes('=') ? argv[roleArg].split('=')[1] : argv[roleArg + 1];
if (
  argv[0] === 'start' &&
  (role === 'worker' || role === 'all' || role === 'ingest') &&
  typeof process.execve === 'function'
) {
  // Every environment read goes through the shared config (its config module alone: no Redis,
  // Kafka or logger is loaded before the re-exec).
  const { loadNodeTuning } = await import('@spillway/shared/config');
  let tuning;
  try {
    tuning = loadNodeTuning();
  } catch (err) {
    process.stderr.write(`spillway: ${err.message}\n`);
    process.exit(1);
  }
  if (tuning.reexec) {
    const given = `${process.execArgv.join(' ')} ${tuning.nodeOptions}`.replaceAll('_', '-');
    // V8's background threads (concurrent GC marking, compilers) are 4 by default. On a machine of
    // two cores they ran beside the main thread and took the other core from the processes a
    // delivery waits for (the receiver, Redis, Kafka): the noisy neighbour's calm p99 under a flood
    // was a third higher with 4 than with 1 (docs/benchmarks/profile.md). Leave the main thread a
    // core: cores − 1, between 1 and 4.
    const v8Pool = Math.min(4, Math.max(1, availableParallelism() - 1));
    const flags = [
      ['--max-semi-space-size', '--max-semi-space-size=16'],
      ['--heap-growing-percent', '--heap-growing-percent=50'],
      ['--v8-pool-size', `--v8-pool-size=${v8Pool}`],
    ]
      .filter(([name]) => !given.includes(name))
      .map(([, flag]) => flag);
    const { fileURLToPath } = await import('node:url');
    process.execve(
      process.execPath,
      [process.execPath, ...process.execArgv, ...flags, fileURLToPath(import.meta.url), ...argv],
      tuning.execEnv,
    );
  }
}
const { main } = await import('../src/index.ts');
await main(process.argv);

/**
 * Backlog memory: a paused tenant receives N events, which the worker must park in the Kafka spill
 * topic rather than in memory; the worker's RSS is sampled while the backlog sits there, then the
 * tenant is resumed and the drain rate is measured at the sink. Repeated in rounds on fresh
 * prefixes; the verdict uses the worst round's peak.
 */

import { createKeys, createQueue } from '@spillway/shared';
import { sleep, waitFor } from '../../helpers/wait.ts';
import { rssOf, rssSampler } from '../lib/procs.ts';
import type { Goal, Row } from '../lib/report.ts';
import { type Sink, startSink } from '../lib/sink.ts';
import { openIntake, SpillwayCluster, tenantCounters } from '../lib/spillway.ts';
import { roundsCell, spread, worstOf } from '../lib/spread.ts';
import { MiB } from '../lib/stats.ts';
import type { Benchmark } from './types.ts';

type Values = Record<string, number>;

/** One full cycle on a fresh prefix; returns what it measured (also when it stopped early). */
async function oneRound(
  sink: Sink,
  N: number,
  r: number,
  quick: boolean,
  log: (m: string) => void,
): Promise<{ values: Values; notes: string[]; complete: boolean }> {
  const drainMs = quick ? 15_000 : 60_000;
  const notes: string[] = [];
  const c = new SpillwayCluster('bb');
  const tag = `big-r${r}`;
  let feeder: Awaited<ReturnType<typeof openIntake>> | undefined;
  const keys = createKeys(c.prefix);
  const q = createQueue(c.redis, keys, keys.intakeQueue);
  let sampler: ReturnType<typeof rssSampler> | undefined;
  let workerPid = 0;
  let enqueued = 0;
  try {
    await c.tenant('big', { maxInFlight: 1000, concurrency: 64 });
    await c.endpoint('big', 'ok', sink.url('ok', tag));
    const w = await c.startRole('worker');
    workerPid = w.proc.pid;
    await sleep(1500);
    const idle = (await rssOf(w.proc.pid)) ?? 0;
    await c.store.updateTenant('big', (t) => ({ ...t, status: 'paused' }));
    await sleep(1200);
    sampler = rssSampler(() => [w.proc.pid]);
    const f = await openIntake(c);
    feeder = f;
    const t0 = performance.now();
    let errors = 0;
    for (let i = 0; i < N; i += 2000) {
      const jobs: Promise<unknown>[] = [];
      for (let j = i; j < Math.min(N, i + 2000); j++) jobs.push(f.submit('big', 128).catch(() => errors++));
      await Promise.all(jobs);
      enqueued = Math.min(N, i + 2000);
      if (i % 100_000 === 0 && i) log(`round ${r}: enqueued ${i}`);
      if (w.proc.child.exitCode !== null)
        throw new Error(`worker exited ${w.proc.child.exitCode} while enqueueing`);
    }
    const enqueueS = (performance.now() - t0) / 1000;
    log(
      `round ${r}: enqueued ${N} in ${enqueueS.toFixed(1)} s (${errors} errors); waiting for the worker to spill them`,
    );
    const spillDeadline = quick ? 120_000 : 360_000;
    let spilledAll = true;
    await waitFor(
      async () => {
        if (w.proc.child.exitCode !== null)
          throw new Error(`worker exited ${w.proc.child.exitCode} while spilling`);
        const counts = await q.getJobCounts('waiting', 'active', 'delayed', 'prioritized', 'paused');
        return Object.values(counts).every((v) => v === 0);
      },
      'the intake queue to empty',
      spillDeadline,
      500,
    ).catch(() => {
      spilledAll = false;
    });
    const spillS = (performance.now() - t0) / 1000;
    const during = sampler.max();
    await sleep(5000);
    const parked = (await rssOf(w.proc.pid)) ?? 0;
    // RSS keeps V8's high-water mark; the live heap says what the backlog really costs in memory.
    const gauge = (text: string, name: string) =>
      Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(text)?.[1] ?? Number.NaN);
    const m = await c.metrics(w).catch(() => '');
    const heapUsed = gauge(m, 'spillway_nodejs_heap_size_used_bytes');
    const external = gauge(m, 'spillway_nodejs_external_memory_bytes');
    const counters = await tenantCounters(c, 'big');
    log(
      `round ${r}: spilled after ${spillS.toFixed(0)} s: counters ${JSON.stringify(counters)}; RSS max ${(during / MiB).toFixed(0)} MiB, parked ${(parked / MiB).toFixed(0)} MiB`,
    );
    if (!spilledAll)
      notes.push(
        `round ${r}: the intake queue was not empty after ${spillDeadline / 1000} s: not everything was spilled.`,
      );
    if (counters.creditsUsed > 0 || counters.queued > 0)
      notes.push(
        `round ${r}: while paused the worker held ${counters.creditsUsed} credits / ${counters.queued} queued.`,
      );

    await c.store.updateTenant('big', (t) => ({ ...t, status: 'active' }));
    const d0 = performance.now();
    await waitFor(async () => (await sink.stats(tag)).count > 0, 'the first drained delivery', 30_000).catch(
      () => {},
    );
    const first = (await sink.stats(tag)).count;
    const firstAt = performance.now();
    await sleep(drainMs);
    const st = await sink.stats(tag);
    const drainRate = ((st.count - first) * 1000) / (performance.now() - firstAt);
    const all = sampler.stop();
    log(
      `round ${r}: drain ${drainRate.toFixed(0)} deliveries/s, ${st.count} delivered in ${((performance.now() - d0) / 1000).toFixed(0)} s; RSS max overall ${((all.get(w.proc.pid) ?? 0) / MiB).toFixed(0)} MiB`,
    );
    const overall = (all.get(w.proc.pid) ?? 0) / MiB;
    return {
      values: {
        idle: idle / MiB,
        spilling: during / MiB,
        parked: parked / MiB,
        heap: heapUsed / MiB,
        external: external / MiB,
        draining: overall,
        peak: Math.max(during / MiB, parked / MiB, overall),
        enqueue: N / enqueueS,
        spill: N / spillS,
        drain: drainRate,
      },
      notes,
      complete: spilledAll,
    };
  } catch (err) {
    // A worker that dies under the backlog is the finding: keep what was measured up to then.
    const peak = sampler ? sampler.maxOf(workerPid) : 0;
    notes.push(
      `round ${r} stopped early after ${enqueued.toLocaleString('en-US')} enqueued: ${(err as Error).message.split('\n')[0]}; worker peak RSS ${(peak / MiB).toFixed(0)} MiB.`,
    );
    return {
      values: { spilling: peak / MiB, draining: peak / MiB, peak: peak / MiB },
      notes,
      complete: false,
    };
  } finally {
    sampler?.stop();
    await q.close().catch(() => {});
    await feeder?.close().catch(() => {});
    await c.close();
  }
}

/** The fan-out benchmark's row the drain target is stated against (benchmarks/fanout.ts). */
const FANOUT_ONE = 'Spillway, 1 endpoint/event';

export const backlog: Benchmark = {
  name: 'backlog',
  title: 'Backlog memory',
  method:
    "One worker process; tenant `big` is paused (through the config store, as `POST /v1/tenants/big/pause` does), then N events of 128 bytes are enqueued through the durable intake (N = 1 000 000; `--quick` 20 000). Paused events must be spilled to Kafka, not held. RSS (VmRSS of the worker process) is sampled every 250 ms while spilling and for 5 s with the whole backlog parked; then the tenant is resumed and deliveries to the sink are counted for 60 s (`--quick` 15 s) to give the drain rate; the remainder is deleted with the run's topic. Rounds: 3 (`--quick` 2), each on a fresh prefix, topic and worker; the table shows the median of the rounds and the worst (highest) peak, and the verdict uses the worst round's peak RSS.",
  targets: [
    'Worker RSS ≤ 300 MiB with 1 000 000 events in backlog (spilled) (worst round).',
    "Drain rate of that backlog ≥ 50 % of the fan-out benchmark's 1 endpoint/event rate (worst round ÷ that rate's median; from the same run when it measured fan-out first, as `pnpm bench` does).",
  ],
  async run({ quick, rounds, log, round, resultOf }) {
    // SPILLWAY_BENCH_BACKLOG overrides the size (calibration runs).
    const N = Number(process.env.SPILLWAY_BENCH_BACKLOG ?? (quick ? 20_000 : 1_000_000));
    const notes: string[] = [];
    const outs: Awaited<ReturnType<typeof oneRound>>[] = [];
    const sink = await startSink();
    try {
      for (let r = 1; r <= rounds; r++) {
        round(r);
        const o = await oneRound(sink, N, r, quick, log);
        outs.push(o);
        notes.push(...o.notes);
      }
    } finally {
      await sink.close();
    }
    const col = (k: string) => outs.map((o) => o.values[k]);
    const med = (k: string) => spread(col(k), 'lower')?.median;
    const peak = spread(col('peak'), 'lower');
    const drain = spread(col('drain'), 'higher');
    const complete = outs.every((o) => o.complete);
    const rows: Row[] = [
      {
        label: `Spillway worker, ${N.toLocaleString('en-US')} backlog${complete ? '' : ' (incomplete)'}`,
        values: {
          idle: med('idle'),
          spilling: med('spilling'),
          parked: med('parked'),
          heap: med('heap'),
          external: med('external'),
          peak: peak?.median,
          peakWorst: peak?.worst,
          enqueue: med('enqueue'),
          spill: med('spill'),
          drain: drain?.median,
          drainWorst: drain?.worst,
          rounds: roundsCell(col('peak')),
        },
      },
    ];
    const goals: Goal[] = [
      {
        what: `worker peak RSS at ${N.toLocaleString('en-US')} backlog (${worstOf(peak, quick)}${quick ? ': not the 1 M target size' : ''})`,
        target: '≤ 300 MiB at 1 M',
        measured: peak?.worst,
        shown: peak ? `worst ${peak.worst.toFixed(0)} MiB, median ${peak.median.toFixed(0)} MiB` : undefined,
        pass: peak === undefined || quick || N !== 1_000_000 ? undefined : peak.worst <= 300,
      },
    ];
    // The drain target is half the 1 endpoint/event fan-out rate: this run's, or the
    // recorded one (its date said) when this run did not measure fan-out.
    const fan = resultOf('fanout');
    const fanRate = fan?.result.rows.find((row) => row.label === FANOUT_ONE)?.values.deliveries;
    if (fan && drain && typeof fanRate === 'number' && fanRate > 0) {
      const ratio = drain.worst / fanRate;
      const from = fan.sameRun ? 'this run' : `the recorded run of ${fan.result.startedAt}`;
      goals.push({
        what: `drain ÷ the 1 endpoint/event fan-out rate (${worstOf(drain, quick)} ÷ the fan-out median ${Math.round(fanRate).toLocaleString('en-US')}/s of ${from})`,
        target: '≥ 0.50',
        measured: ratio,
        shown: `worst ${Math.round(drain.worst).toLocaleString('en-US')}/s = ${ratio.toFixed(2)}, median ${Math.round(drain.median).toLocaleString('en-US')}/s = ${(drain.median / fanRate).toFixed(2)}`,
        // A verdict only against a fan-out rate measured in the same full run.
        pass: quick || !fan.sameRun || fan.result.quick ? undefined : ratio >= 0.5,
      });
    } else notes.push('No fan-out result to hold the drain rate against (run `--only fanout,backlog`).');
    return {
      status: outs.some((o) => o.complete) ? 'ok' : 'partial',
      columns: [
        { key: 'idle', header: 'RSS idle MiB' },
        { key: 'spilling', header: 'RSS max spilling MiB' },
        { key: 'parked', header: 'RSS parked MiB' },
        { key: 'heap', header: 'heap used parked MiB' },
        { key: 'external', header: 'external parked MiB' },
        { key: 'peak', header: 'RSS peak MiB median' },
        { key: 'peakWorst', header: 'worst' },
        { key: 'enqueue', header: 'enqueue ev/s' },
        { key: 'spill', header: 'enqueue+spill ev/s' },
        { key: 'drain', header: 'drain deliveries/s median' },
        { key: 'drainWorst', header: 'worst' },
        { key: 'rounds', header: 'peak MiB per round' },
      ],
      rows,
      goals,
      notes: [...notes, 'Medians of the rounds except where a column says worst.'],
      chart: { key: 'peak', unit: 'worker peak RSS MiB, median of rounds (lower is better; target ≤ 300)' },
    };
  },
};

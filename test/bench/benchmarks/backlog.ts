/**
 * Backlog memory: a paused tenant receives N events, which the worker must park in the Kafka spill
 * topic rather than in memory; the worker's RSS is sampled while the backlog sits there, then the
 * tenant is resumed and the drain rate is measured at the sink.
 */

import { createKeys } from '@spillway/shared';
import { Queue } from 'bullmq';
import { rssOf, rssSampler, sleep, until } from '../lib/procs.ts';
import type { Goal, Row } from '../lib/report.ts';
import { startSink } from '../lib/sink.ts';
import { openIntake, SpillwayCluster, tenantCounters } from '../lib/spillway.ts';
import { MiB } from '../lib/stats.ts';
import type { Benchmark } from './types.ts';

export const backlog: Benchmark = {
  name: 'backlog',
  title: 'Backlog memory',
  method:
    "One worker process; tenant `big` is paused (through the config store, as `POST /v1/tenants/big/pause` does), then N events of 128 bytes are enqueued through the durable intake (N = 1 000 000; `--quick` 20 000). Paused events must be spilled to Kafka, not held. RSS (VmRSS of the worker process) is sampled every 250 ms while spilling and for 5 s with the whole backlog parked; then the tenant is resumed and deliveries to the sink are counted for 60 s (`--quick` 15 s) to give the drain rate; the remainder is deleted with the run's topic.",
  targets: [
    'Worker RSS ≤ 300 MiB with 1 000 000 events in backlog (spilled).',
    'Drain rate reported (no target in the issue).',
  ],
  async run({ quick, log }) {
    // SPILLWAY_BENCH_BACKLOG overrides the size (calibration runs).
    const N = Number(process.env.SPILLWAY_BENCH_BACKLOG ?? (quick ? 20_000 : 1_000_000));
    const drainMs = quick ? 15_000 : 60_000;
    const rows: Row[] = [];
    const notes: string[] = [];
    const sink = await startSink();
    const c = new SpillwayCluster('bb');
    let feeder: Awaited<ReturnType<typeof openIntake>> | undefined;
    const keys = createKeys(c.prefix);
    const q = new Queue(keys.intakeQueue, { connection: c.redis as never, prefix: keys.bullPrefix });
    let sampler: ReturnType<typeof rssSampler> | undefined;
    let workerPid = 0;
    let enqueued = 0;
    try {
      await c.tenant('big', { maxInFlight: 1000, concurrency: 64 });
      await c.endpoint('big', 'ok', sink.url('ok', 'big'));
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
        if (i % 100_000 === 0 && i) log(`enqueued ${i}`);
        if (w.proc.child.exitCode !== null)
          throw new Error(`worker exited ${w.proc.child.exitCode} while enqueueing`);
      }
      const enqueueS = (performance.now() - t0) / 1000;
      log(
        `enqueued ${N} in ${enqueueS.toFixed(1)} s (${errors} errors); waiting for the worker to spill them`,
      );
      const spillDeadline = quick ? 120_000 : 360_000;
      let spilledAll = true;
      await until(
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
        `spilled after ${spillS.toFixed(0)} s: counters ${JSON.stringify(counters)}; RSS max ${(during / MiB).toFixed(0)} MiB, parked ${(parked / MiB).toFixed(0)} MiB`,
      );
      if (!spilledAll)
        notes.push(
          `the intake queue was not empty after ${spillDeadline / 1000} s: not everything was spilled.`,
        );
      if (counters.creditsUsed > 0 || counters.queued > 0)
        notes.push(
          `while paused the worker held ${counters.creditsUsed} credits / ${counters.queued} queued.`,
        );

      await c.store.updateTenant('big', (t) => ({ ...t, status: 'active' }));
      const d0 = performance.now();
      await until(
        async () => (await sink.stats('big')).count > 0,
        'the first drained delivery',
        30_000,
      ).catch(() => {});
      const first = (await sink.stats('big')).count;
      const firstAt = performance.now();
      await sleep(drainMs);
      const st = await sink.stats('big');
      const drainRate = ((st.count - first) * 1000) / (performance.now() - firstAt);
      const all = sampler.stop();
      log(
        `drain: ${drainRate.toFixed(0)} deliveries/s, ${st.count} delivered in ${((performance.now() - d0) / 1000).toFixed(0)} s; RSS max overall ${((all.get(w.proc.pid) ?? 0) / MiB).toFixed(0)} MiB`,
      );
      rows.push({
        label: `Spillway worker, ${N.toLocaleString('en-US')} backlog`,
        values: {
          idle: idle / MiB,
          spilling: during / MiB,
          parked: parked / MiB,
          heap: heapUsed / MiB,
          external: external / MiB,
          draining: (all.get(w.proc.pid) ?? 0) / MiB,
          enqueue: N / enqueueS,
          spill: N / spillS,
          drain: drainRate,
        },
      });
    } catch (err) {
      // A worker that dies under the backlog is the finding: keep what was measured up to then.
      const peak = sampler ? sampler.maxOf(workerPid) : 0;
      notes.push(
        `stopped early after ${enqueued.toLocaleString('en-US')} enqueued: ${(err as Error).message.split('\n')[0]}; worker peak RSS ${(peak / MiB).toFixed(0)} MiB.`,
      );
      rows.push({
        label: `Spillway worker, ${N.toLocaleString('en-US')} backlog (incomplete)`,
        values: { spilling: peak / MiB, draining: peak / MiB },
      });
    } finally {
      sampler?.stop();
      await q.close().catch(() => {});
      await feeder?.close().catch(() => {});
      await c.close();
      await sink.close();
    }
    const r = rows[0]?.values;
    const peak = r
      ? Math.max(
          ...['parked', 'spilling', 'draining'].map((k) => (typeof r[k] === 'number' ? (r[k] as number) : 0)),
        )
      : undefined;
    const goals: Goal[] = [
      {
        what: `worker peak RSS at ${N.toLocaleString('en-US')} backlog${quick ? ' (quick: not the 1 M target size)' : ''}`,
        target: '≤ 300 MiB at 1 M',
        measured: peak,
        shown: peak === undefined ? undefined : `${peak.toFixed(0)} MiB`,
        pass: peak === undefined || quick ? undefined : peak <= 300,
      },
    ];
    return {
      status: rows.length ? 'ok' : 'partial',
      columns: [
        { key: 'idle', header: 'RSS idle MiB' },
        { key: 'spilling', header: 'RSS max spilling MiB' },
        { key: 'parked', header: 'RSS parked MiB' },
        { key: 'heap', header: 'heap used parked MiB' },
        { key: 'external', header: 'external parked MiB' },
        { key: 'draining', header: 'RSS max overall MiB' },
        { key: 'enqueue', header: 'enqueue ev/s' },
        { key: 'spill', header: 'enqueue+spill ev/s' },
        { key: 'drain', header: 'drain deliveries/s' },
      ],
      rows,
      goals,
      notes,
      chart: { key: 'draining', unit: 'worker peak RSS MiB (lower is better; target ≤ 300)' },
    };
  },
};

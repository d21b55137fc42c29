/**
 * Noisy neighbour: a healthy tenant's end-to-end p99 (enqueue → sink) alone, then while another
 * tenant floods at 10× its rate into an endpoint that never answers, in the same worker process.
 */
import { sleep, until } from '../lib/procs.ts';
import type { Goal, Row } from '../lib/report.ts';
import { startSink } from '../lib/sink.ts';
import { openIntake, openLoop, SpillwayCluster, tenantCounters } from '../lib/spillway.ts';
import type { Benchmark } from './types.ts';

export const noisy: Benchmark = {
  name: 'noisy',
  title: 'Noisy neighbour',
  method:
    'One worker process. Tenant `calm` sends R events/s (R = 100; `--quick` 50) through the durable intake to an endpoint answering 200; latency = sink arrival − `sentAt` stamped in the body just before enqueue. Phase 1: calm alone. Phase 2: tenant `flood` adds 10 × R events/s to an endpoint that never answers (5 s timeout), so its credits fill and its backlog spills, while calm keeps sending. Each phase 20 s (`--quick` 8 s) with its own calm tenant; every calm event sent in the phase counts (a bounded wait lets stragglers arrive; one that never arrives makes p99 unbounded).',
  targets: ["Healthy tenant's p99 with the flood ÷ p99 alone ≤ 1.5."],
  async run({ quick, log }) {
    const R = quick ? 50 : 100;
    const phaseMs = quick ? 8000 : 20_000;
    const rows: Row[] = [];
    const notes: string[] = [];
    const sink = await startSink();
    const c = new SpillwayCluster('bn');
    let feeder: Awaited<ReturnType<typeof openIntake>> | undefined;
    try {
      // One calm tenant per phase (same limits, own sink tag) so late arrivals of one phase never
      // land in the other's numbers.
      for (const t of ['calm1', 'calm2', 'flood']) await c.tenant(t);
      await c.endpoint('calm1', 'ok', sink.url('ok', 'calm1'));
      await c.endpoint('calm2', 'ok', sink.url('ok', 'calm2'));
      await c.endpoint('flood', 'hang', sink.url('hang', 'flood'), { timeoutMs: 5000 });
      const w = await c.startRole('worker');
      const f = await openIntake(c);
      feeder = f;
      await f.submit('calm1');
      await until(async () => (await sink.stats('calm1')).count > 0, 'the first calm delivery', 30_000);
      await sleep(1000);

      const phase = async (tid: 'calm1' | 'calm2', withFlood: boolean) => {
        await sink.reset(tid);
        const floodRun = withFlood
          ? openLoop(() => f.submit('flood'), R * 10, phaseMs)
          : Promise.resolve({ sent: 0, errors: 0 });
        const [calm, flood] = await Promise.all([openLoop(() => f.submit(tid), R, phaseMs), floodRun]);
        // Every calm event must arrive: one that never does is not a fast one. Bounded wait.
        await until(
          async () => (await sink.stats(tid)).count >= calm.sent,
          'calm to drain',
          quick ? 20_000 : 40_000,
        ).catch(() => {});
        const st = await sink.stats(tid);
        const fc = withFlood ? await tenantCounters(c, 'flood') : undefined;
        log(
          `${withFlood ? 'with flood' : 'alone'}: ${st.count}/${calm.sent} arrived; p50 ${st.latP50.toFixed(1)} ms p99 ${st.latP99.toFixed(1)} ms (flood sent ${flood.sent}${fc ? `, spilled ${fc.spilled}, in flight ${fc.inFlight}` : ''})`,
        );
        // Events still missing count as slower than anything seen.
        const p99 = st.count >= calm.sent ? st.latP99 : Number.POSITIVE_INFINITY;
        return { st, calm, flood, fc, p99 };
      };
      const alone = await phase('calm1', false);
      const noisyP = await phase('calm2', true);
      rows.push({
        label: 'Spillway calm tenant alone',
        values: {
          rate: R,
          p50: alone.st.latP50,
          p99: alone.p99,
          max: alone.st.latMax,
          n: `${alone.st.count}/${alone.calm.sent}`,
          flood: 0,
        },
      });
      rows.push({
        label: 'Spillway calm tenant + 10× flood',
        values: {
          rate: R,
          p50: noisyP.st.latP50,
          p99: noisyP.p99,
          max: noisyP.st.latMax,
          n: `${noisyP.st.count}/${noisyP.calm.sent}`,
          flood: noisyP.flood.sent,
        },
      });
      if (noisyP.fc)
        notes.push(
          `flood tenant at the end: ${noisyP.fc.spilled} spilled, ${noisyP.fc.inFlight} in flight, ${noisyP.fc.creditsUsed} credits used.`,
        );
      const rssNote = await import('../lib/procs.ts').then((p) => p.rssOf(w.proc.pid));
      if (rssNote) notes.push(`worker RSS at the end: ${(rssNote / 2 ** 20).toFixed(0)} MiB.`);
    } finally {
      await feeder?.close().catch(() => {});
      await c.close();
      await sink.close();
    }
    const a = rows[0]?.values.p99 as number | undefined;
    const b = rows[1]?.values.p99 as number | undefined;
    const ratio = a && b ? b / a : undefined;
    if (b === Number.POSITIVE_INFINITY)
      notes.push(
        'Some calm events had not arrived by the end of the bounded wait: p99 shown as —, ratio unbounded.',
      );
    if (rows[1]) rows[1].values.ratio = ratio === undefined ? undefined : ratio;
    if (rows[0]) rows[0].values.ratio = 1;
    const goals: Goal[] = [
      {
        what: 'calm p99 with flood ÷ alone',
        target: '≤ 1.5',
        measured: ratio,
        shown: ratio === Number.POSITIVE_INFINITY ? 'unbounded (calm events missing)' : undefined,
        pass: ratio === undefined ? undefined : ratio <= 1.5,
      },
    ];
    return {
      status: ratio === undefined ? 'partial' : 'ok',
      columns: [
        { key: 'rate', header: 'calm ev/s' },
        { key: 'flood', header: 'flood sent' },
        { key: 'n', header: 'arrived' },
        { key: 'p50', header: 'p50 ms', digits: 1 },
        { key: 'p99', header: 'p99 ms', digits: 1 },
        { key: 'max', header: 'max ms', digits: 1 },
        { key: 'ratio', header: 'p99 ratio', digits: 2 },
      ],
      rows,
      goals,
      notes,
      chart: { key: 'p99', unit: 'calm tenant p99 ms (lower is better)' },
    };
  },
};

/**
 * A slow-loris swarm (500 connections trickling header lines) plus bursts of oversized bodies
 * (Content-Length past the source's cap, and chunked bodies that never end in time) while real
 * signed traffic flows. The real traffic's p99 must stay within 2× of its p99 without the attack
 * and the ingest process's memory within budget; nothing accepted may be lost.
 */
import { cpuMicrosOf, forkTs, rssOf, rssSampler } from '../../bench/lib/procs.ts';
import { startSink } from '../../bench/lib/sink.ts';
import { SpillwayCluster } from '../../bench/lib/spillway.ts';
import { MiB } from '../../bench/lib/stats.ts';
import { sleep } from '../../helpers/wait.ts';
import type { AttackResult } from '../lib/attacker.ts';
import { LoadGen } from '../lib/load.ts';
import { acme, type Outcome, outcome, settle, tearDown } from '../lib/outcome.ts';
import type { ScenarioOptions } from './types.ts';

const SWARM = 500;
const BODY_BUDGET = 64 * MiB;

export async function slowloris({ short, log }: ScenarioOptions): Promise<Outcome> {
  const rate = 100;
  const phaseMs = short ? 8000 : 20_000;
  const t0 = Date.now();
  const sink = await startSink({ trackIds: true });
  const c = new SpillwayCluster('cs', { extra: { SPILLWAY_INGEST_BODY_BUDGET: String(BODY_BUDGET) } });
  const failures: string[] = [];
  let load: LoadGen | undefined;
  const rss = rssSampler(() => c.roles.filter((r) => r.role === 'ingest').map((r) => r.proc.pid), 100);
  try {
    const src = await acme(c, sink, 'sl'); // bodies up to 1 MiB: the oversized ones are above
    // SPILLWAY_CHAOS_INGEST_BACKEND=uring|node: the ingest backend under attack (default: auto).
    const backend = process.env.SPILLWAY_CHAOS_INGEST_BACKEND;
    const ingest = await c.startRole('ingest', backend ? { SPILLWAY_INGEST_BACKEND: backend } : {});
    await c.startRole('worker');
    const port = ingest.ingestPort!;
    // Which backend took the attack: `auto` falls back to node:http when io_uring cannot start.
    const used = /io_uring unavailable/.test(ingest.proc.err())
      ? 'node (auto fell back)'
      : (backend ?? 'auto');
    const l = new LoadGen(() => port, src);
    load = l;
    l.start(rate);
    await sleep(2000);
    l.resetLatency();
    await sleep(phaseMs);
    const base = { p50: l.latency.pct(50), p99: l.latency.pct(99), n: l.latency.count };
    const ingestCpu0 = (await cpuMicrosOf(ingest.proc.pid)) ?? 0;
    const ingestT0 = performance.now();
    const baseRss = (await rssOf(ingest.proc.pid)) ?? 0;
    log(
      `baseline: p50 ${base.p50.toFixed(1)} ms p99 ${base.p99.toFixed(1)} ms over ${base.n}; ingest RSS ${(baseRss / MiB).toFixed(0)} MiB`,
    );

    // The attack runs in a process of its own; the real traffic's latency is measured here.
    const attacker = forkTs(new URL('../lib/attacker.ts', import.meta.url), [
      String(port),
      `/ingest/${src.id}`,
      String(SWARM),
      String(phaseMs),
    ]);
    const attacked = new Promise<AttackResult>((resolve, reject) => {
      attacker.child.once('message', (m) => resolve(m as AttackResult));
      attacker.child.once('exit', (code) =>
        reject(new Error(`attacker exited ${code}: ${attacker.err().slice(-300)}`)),
      );
    });
    await sleep(1500);
    l.resetLatency();
    const res = await attacked;
    const ingestCpu = ((await cpuMicrosOf(ingest.proc.pid)) ?? 0) - ingestCpu0;
    const attackS = (performance.now() - ingestT0) / 1000;
    const ingestPct = (ingestCpu / 1e4 / attackS).toFixed(0);
    const attackerPct = (res.cpuMs / 10 / attackS).toFixed(0);
    const attack = { p50: l.latency.pct(50), p99: l.latency.pct(99), n: l.latency.count };
    const { bursts, swarmOpen, swarmClosed } = res;
    const bigStatuses = new Map(Object.entries(res.statuses));
    await l.stop();
    const ratio = attack.p99 / base.p99;
    const maxRss = rss.max();
    const budget = baseRss + BODY_BUDGET + 64 * MiB;
    const big = [...bigStatuses].map(([k, v]) => `${k}:${v}`).join(',');
    log(
      `attack: p50 ${attack.p50.toFixed(1)} ms p99 ${attack.p99.toFixed(1)} ms over ${attack.n} (×${ratio.toFixed(2)}); swarm open ${swarmOpen}, closed by server ${swarmClosed}; oversized ${big}; ingest RSS max ${(maxRss / MiB).toFixed(0)} MiB (budget ${(budget / MiB).toFixed(0)}); CPU over the attack: ingest ${ingestPct} % of a core, attacker ${attackerPct} %`,
    );
    const s = await settle(l, sink, 'sl', 90_000, c);
    if ([...bigStatuses.keys()].some((k) => /-2\d\d$/.test(k)))
      failures.push(`an oversized body was answered 2xx (${big})`);
    // Timing and memory are expectations of the long form; the short (CI) form fails only on loss.
    if (!short && ratio > 2) failures.push(`real traffic p99 ×${ratio.toFixed(2)} under attack (> 2×)`);
    if (!short && maxRss > budget)
      failures.push(
        `ingest RSS ${(maxRss / MiB).toFixed(0)} MiB over budget ${(budget / MiB).toFixed(0)} MiB`,
      );
    return outcome({
      scenario: 'slowloris+oversized',
      load: l,
      settled: s,
      roles: c.roles,
      maxRss,
      extra: {
        p99_base_ms: base.p99.toFixed(1),
        p99_attack_ms: attack.p99.toFixed(1),
        p99_ratio: ratio.toFixed(2),
        swarm: SWARM,
        swarm_closed_by_server: swarmClosed,
        oversized: big,
        bursts,
        backend: used,
        ingest_cpu_pct: ingestPct,
        attacker_cpu_pct: attackerPct,
        rss_budget_MiB: (budget / MiB).toFixed(0),
      },
      failures,
      t0,
    });
  } finally {
    await tearDown({ rss, load, c, sink });
  }
}

/**
 * A slow-loris swarm (500 connections trickling header lines) plus bursts of oversized bodies
 * (Content-Length past the source's cap, and chunked bodies that never end in time) while real
 * signed traffic flows. The real traffic's p99 must stay within 2× of its p99 without the attack
 * and the ingest process's memory within budget; nothing accepted may be lost.
 */
import { connect, type Socket } from 'node:net';
import { Readable } from 'node:stream';
import { Agent, request } from 'undici';
import { rssOf, rssSampler, sleep } from '../../bench/lib/procs.ts';
import { startSink } from '../../bench/lib/sink.ts';
import { describeDeath, SpillwayCluster } from '../../bench/lib/spillway.ts';
import { MiB } from '../../bench/lib/stats.ts';
import { LoadGen } from '../lib/load.ts';
import { type Outcome, settle, toMiB } from '../lib/outcome.ts';
import type { ScenarioOptions } from './types.ts';

const SWARM = 500;
const BODY_BUDGET = 64 * MiB;

/** Opens `n` connections that send a request line and then one header line per second, forever. */
function swarm(port: number, path: string, n: number) {
  const sockets: Socket[] = [];
  let closedByServer = 0;
  let stopping = false;
  for (let i = 0; i < n; i++) {
    const s = connect(port, '127.0.0.1');
    s.on('error', () => {});
    s.on('close', () => {
      if (!stopping) closedByServer++;
    });
    s.once('connect', () =>
      s.write(`POST ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n`),
    );
    sockets.push(s);
  }
  let k = 0;
  const t = setInterval(() => {
    k++;
    for (const s of sockets) if (!s.destroyed && s.writable) s.write(`X-Trickle-${k}: ${'a'.repeat(8)}\r\n`);
  }, 1000);
  return {
    closedByServer: () => closedByServer,
    open: () => sockets.filter((s) => !s.destroyed).length,
    stop() {
      stopping = true;
      clearInterval(t);
      for (const s of sockets) s.destroy();
    },
  };
}

/** One oversized request: a declared `Content-Length` past the cap, or a chunked body of `bytes`. */
async function oversized(agent: Agent, url: string, bytes: number, chunked: boolean): Promise<string> {
  let sent = 0;
  const chunk = Buffer.alloc(64 * 1024, 0x61);
  const body = Readable.from(
    (async function* () {
      while (sent < bytes) {
        sent += chunk.length;
        yield chunk;
      }
    })(),
  );
  try {
    const res = await request(url, {
      method: 'POST',
      dispatcher: agent,
      body,
      headers: {
        'content-type': 'application/json',
        'x-github-event': 'push',
        'x-github-delivery': `big-${Math.random()}`,
        'x-hub-signature-256': 'sha256=00',
        ...(chunked ? {} : { 'content-length': String(bytes) }),
      },
    });
    await res.body.dump();
    return String(res.statusCode);
  } catch (err) {
    return `error:${(err as { code?: string }).code ?? 'other'}`;
  }
}

export async function slowloris({ short, log }: ScenarioOptions): Promise<Outcome> {
  const rate = 100;
  const phaseMs = short ? 8000 : 20_000;
  const t0 = Date.now();
  const sink = await startSink({ trackIds: true });
  const c = new SpillwayCluster('cs', { extra: { SPILLWAY_INGEST_BODY_BUDGET: String(BODY_BUDGET) } });
  const failures: string[] = [];
  let load: LoadGen | undefined;
  const bigAgent = new Agent({ connections: 64, headersTimeout: 20_000, bodyTimeout: 20_000 });
  const rss = rssSampler(() => c.roles.filter((r) => r.role === 'ingest').map((r) => r.proc.pid), 100);
  let sw: ReturnType<typeof swarm> | undefined;
  try {
    await c.tenant('acme', { maxInFlight: 2000, concurrency: 32 });
    await c.endpoint('acme', 'ep', sink.url('ok', 'sl'));
    const src = await c.githubSource('acme', 'gh', { maxBodyBytes: 1024 * 1024 });
    const ingest = await c.startRole('ingest');
    await c.startRole('worker');
    const port = ingest.ingestPort!;
    const l = new LoadGen(() => port, src);
    load = l;
    l.start(rate);
    await sleep(2000);
    l.resetLatency();
    await sleep(phaseMs);
    const base = { p50: l.latency.pct(50), p99: l.latency.pct(99), n: l.latency.count };
    const baseRss = (await rssOf(ingest.proc.pid)) ?? 0;
    log(
      `baseline: p50 ${base.p50.toFixed(1)} ms p99 ${base.p99.toFixed(1)} ms over ${base.n}; ingest RSS ${(baseRss / MiB).toFixed(0)} MiB`,
    );

    sw = swarm(port, `/ingest/${src.id}`, SWARM);
    await sleep(1500);
    l.resetLatency();
    const bigStatuses = new Map<string, number>();
    const url = `http://127.0.0.1:${port}/ingest/${src.id}`;
    const attackEnd = Date.now() + phaseMs;
    let bursts = 0;
    for (let i = 0; i < 1000 && Date.now() < attackEnd; i++) {
      // A burst: 20 declared 8 MiB bodies and 10 chunked 4 MiB bodies at once.
      const burst = [
        ...Array.from({ length: 20 }, () => oversized(bigAgent, url, 8 * MiB, false)),
        ...Array.from({ length: 10 }, () => oversized(bigAgent, url, 4 * MiB, true)),
      ];
      const answers = await Promise.all(burst);
      // Keyed by kind: a declared-length body and a chunked one hit different guards.
      answers.forEach((s, k) => {
        const key = `${k < 20 ? 'cl' : 'chunked'}-${s}`;
        bigStatuses.set(key, (bigStatuses.get(key) ?? 0) + 1);
      });
      bursts++;
      await sleep(1000);
    }
    const attack = { p50: l.latency.pct(50), p99: l.latency.pct(99), n: l.latency.count };
    const swarmOpen = sw.open();
    const swarmClosed = sw.closedByServer();
    sw.stop();
    await l.stop();
    const ratio = attack.p99 / base.p99;
    const maxRss = rss.max();
    const budget = baseRss + BODY_BUDGET + 64 * MiB;
    const big = [...bigStatuses].map(([k, v]) => `${k}:${v}`).join(',');
    log(
      `attack: p50 ${attack.p50.toFixed(1)} ms p99 ${attack.p99.toFixed(1)} ms over ${attack.n} (×${ratio.toFixed(2)}); swarm open ${swarmOpen}, closed by server ${swarmClosed}; oversized ${big}; ingest RSS max ${(maxRss / MiB).toFixed(0)} MiB (budget ${(budget / MiB).toFixed(0)})`,
    );
    const s = await settle(l, sink, 'sl', 90_000);
    for (const r of c.roles) if (r.proc.child.exitCode !== null) failures.push(describeDeath(r));
    if (s.lost > 0) failures.push(`${s.lost} accepted events never delivered (e.g. ${s.missing.join(', ')})`);
    if ([...bigStatuses.keys()].some((k) => /-2\d\d$/.test(k)))
      failures.push(`an oversized body was answered 2xx (${big})`);
    // Timing and memory are expectations of the long form; the short (CI) form fails only on loss.
    if (!short && ratio > 2) failures.push(`real traffic p99 ×${ratio.toFixed(2)} under attack (> 2×)`);
    if (!short && maxRss > budget)
      failures.push(
        `ingest RSS ${(maxRss / MiB).toFixed(0)} MiB over budget ${(budget / MiB).toFixed(0)} MiB`,
      );
    return {
      scenario: 'slowloris+oversized',
      sent: l.sent,
      accepted: l.accepted.size,
      delivered: s.delivered,
      duplicates: s.duplicates,
      lost: s.lost,
      s503: l.count('503'),
      maxRssMiB: toMiB(maxRss),
      extra: {
        p99_base_ms: base.p99.toFixed(1),
        p99_attack_ms: attack.p99.toFixed(1),
        p99_ratio: ratio.toFixed(2),
        swarm: SWARM,
        swarm_closed_by_server: swarmClosed,
        oversized: big,
        bursts,
        rss_budget_MiB: (budget / MiB).toFixed(0),
      },
      failures,
      seconds: (Date.now() - t0) / 1000,
    };
  } finally {
    sw?.stop();
    rss.stop();
    await load?.stop().catch(() => {});
    await load?.close().catch(() => {});
    await bigAgent.close().catch(() => {});
    await c.close();
    await sink.close();
  }
}

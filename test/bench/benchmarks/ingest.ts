/**
 * Ingest ceiling: wrk POSTing distinct 1 KiB GitHub-signed bodies, each with a unique X-GitHub-Delivery, at
 * nginx `return 202`, a bare node:http 202 server, the naive receiver a team writes instead
 * (node:http → HMAC → `Queue.add` per event → 202) and Spillway — the ingest role (node and uring
 * backends) on the full pipeline (source lookup, HMAC verify, dedup, durable group-committed
 * enqueue into Redis with AOF on) and `spillway start` with every role in one process — in one run,
 * on the same cores, in rounds; the verdicts use the worst round.
 */

import { randomBytes } from 'node:crypto';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { Agent } from 'undici';
import { makeTestCerts, type TestCerts } from '../../helpers/tls.ts';
import { startNginx } from '../lib/nginx.ts';
import { forkTs, type Proc } from '../lib/procs.ts';
import type { Goal, Row } from '../lib/report.ts';
import { startSink } from '../lib/sink.ts';
import { deletePrefix, postGithub, REDIS_URL, SpillwayCluster } from '../lib/spillway.ts';
import { perRound, roundsCell, type Spread, spread, worstOf } from '../lib/spread.ts';
import { deliveryAt, runWrk, type WrkResult } from '../lib/wrk.ts';
import type { Benchmark } from './types.ts';

/**
 * Ids a tenant's dedup fingerprints hold (docs/storage.md): the sum of the entry counts (`n`) of its
 * fingerprint slots, `<prefix>:{t:<tenant>}:dd:<slot>:m`.
 */
async function seenIds(redis: SpillwayCluster['redis'], prefix: string, tenantId: string): Promise<number> {
  let n = 0;
  let cursor = '0';
  const pattern = `${prefix}:{t:${tenantId}}:dd:*:m`;
  for (let i = 0; i < 100_000; i++) {
    const [next, keys] = (await redis.scan(cursor, 'MATCH', pattern, 'COUNT', 5000)) as [string, string[]];
    for (const k of keys) n += Number((await redis.hget(k, 'n')) ?? 0);
    cursor = next;
    if (cursor === '0') break;
  }
  return n;
}

const PLAIN = { 'content-type': 'application/json', 'x-github-event': 'push' };
/** Secret the peers' requests are signed with (those that do not check it). */
const PEER_SECRET = 'bench-peer-secret';
/**
 * Distinct deliveries precomputed per wrk run (lib/wrk.ts): the ingest deduplicates GitHub bodies
 * on sha256(body), so one fixed body under fresh ids would measure its duplicate path. Warm-up:
 * CEILING_RPS × its seconds, or twice the best rate seen so far if higher; measured run: MARGIN ×
 * the target's own warm-up rate × its seconds (at least MIN_RPS). A run that outgrows its pool
 * reports the excess (`exhausted`) and fails its row.
 */
const CEILING_RPS = 250_000;
const MIN_RPS = 20_000;
const MARGIN = 3;

/** A started target: where to POST, and how to prove afterwards that its 202s meant something. */
interface Target {
  url: string;
  headers: Record<string, string>;
  /** What the X-Hub-Signature-256 of every request is computed with. */
  secret: string;
  /** Status text after a run in which `acked` requests got a 2xx (warm-up + probe + measured). */
  verify?(acked: number): Promise<{ status: string; note?: string }>;
  /** Requests acknowledged before wrk started (probes). */
  probes?: number;
  close(): Promise<void>;
}

interface TargetSpec {
  key: string;
  label: string;
  start(runTag: string): Promise<Target>;
}

async function forkWithPort(mod: string, args: string[] = [], env: NodeJS.ProcessEnv = process.env) {
  const proc = forkTs(new URL(mod, import.meta.url), args, env);
  const m = await new Promise<{ port: number; backend?: string }>((resolve, reject) => {
    proc.child.once('message', (x: { port: number; backend?: string }) => resolve(x));
    proc.child.once('exit', (c) => {
      // The error's own line, not the tail of its stack.
      const err = proc.err().trim();
      const line = err.split('\n').find((l) => /error/i.test(l)) ?? err.slice(-300);
      reject(new Error(`${mod} exited ${c}: ${line.trim()}`));
    });
  });
  return { proc, ...m };
}

/** The test CA and certificate the TLS rows serve (made once per run, removed after it). */
let certs: TestCerts | undefined;
const tlsCerts = (): TestCerts => {
  certs ??= makeTestCerts('spillway-bench');
  return certs;
};

/**
 * Spillway roles on a fresh prefix: the ingest role alone, or every role in one process. `tls`: the
 * ingest port with SPILLWAY_TLS_CERT/KEY, measured over HTTPS (wrk speaks HTTP/1.1 over TLS).
 * `auto`: SPILLWAY_INGEST_BACKEND left at its default, as a new user runs it (io_uring where the
 * kernel allows it); the row notes which backend took the run.
 */
function spillwayTarget(
  backend: 'node' | 'uring' | 'auto',
  role: 'ingest' | 'all',
  tls = false,
): TargetSpec['start'] {
  return async (runTag) => {
    const c = new SpillwayCluster('bi');
    const sink = role === 'all' ? await startSink() : undefined;
    const dispatcher = tls ? new Agent({ connect: { ca: tlsCerts().ca } }) : undefined;
    const close = async () => {
      await c.close();
      await sink?.close();
      await dispatcher?.close();
    };
    try {
      await c.tenant('acme');
      const src = await c.githubSource('acme', `gh-${backend}`);
      // All-in-one, as a new user runs it: the worker in the same process delivers what arrives.
      if (sink) await c.endpoint('acme', 'ep', sink.url('ok', 'all'));
      const r = await c.startRole(role, {
        ...(backend !== 'auto' && { SPILLWAY_INGEST_BACKEND: backend }),
        ...(tls && { SPILLWAY_TLS_CERT: tlsCerts().certPath, SPILLWAY_TLS_KEY: tlsCerts().keyPath }),
      });
      if (r.ingestPort === undefined) throw new Error('the process did not open an ingest port');
      // A distinct probe body ([a-z0-9] run tag, as lib/wrk.ts requires).
      const p = deliveryAt(`${runTag.replace(/[^a-z0-9]/g, '').slice(-15)}p`, 0);
      const probe = await postGithub(
        r.ingestPort,
        src,
        p.id,
        p.body,
        dispatcher,
        tls ? 'https' : 'http',
      ).catch((e) => String(e));
      if (probe !== 202) throw new Error(`a signed probe got ${probe}, not 202`);
      const metrics = await c.metrics(r).catch(() => '');
      // Which backend took it: the probe's HMAC ran on the ring thread (io_uring) or in JS (node),
      // or as its start banner says (`ingest backend: …`).
      const verified = (where: string) =>
        new RegExp(`spillway_ingest_verified_total\\{[^}]*where="${where}"[^}]*\\} [1-9]`).test(metrics);
      const seen =
        (verified('ring') ? 'uring' : verified('js') ? 'node' : undefined) ??
        /backend[=:"\s]+(node|uring)/.exec(r.proc.out() + r.proc.err())?.[1];
      return {
        url: `${tls ? 'https' : 'http'}://127.0.0.1:${r.ingestPort}/ingest/${src.id}`,
        headers: PLAIN,
        secret: src.secret,
        probes: 1,
        // Proof that the 202s were durable, not a stub: every acknowledged delivery id is among
        // the tenant's dedup fingerprints in Redis (made seen with its batch).
        async verify(acked) {
          const markers = await seenIds(c.redis, c.prefix, 'acme');
          const delivered = sink
            ? `its worker delivered ${(await sink.stats('all')).count} of the ${acked} events meanwhile.`
            : undefined;
          // (Over TLS the uring backend hands connections to its node half: JS verifies.)
          if (seen && backend !== 'auto' && !tls && seen !== backend) return { status: `ran as ${seen}` };
          return markers >= acked
            ? {
                status: 'ok, durable',
                note: [backend === 'auto' ? `backend: ${seen ?? 'not reported'}.` : undefined, delivered]
                  .filter(Boolean)
                  .join(' '),
              }
            : {
                status: `only ${markers}/${acked} durable`,
                note: `${acked} requests acknowledged but only ${markers} ids among the dedup fingerprints in Redis.`,
              };
        },
        close,
      };
    } catch (err) {
      await close();
      throw err;
    }
  };
}

const TARGETS: TargetSpec[] = [
  {
    key: 'nginx',
    label: 'nginx return 202',
    async start() {
      const nginx = await startNginx(1);
      return {
        url: `http://127.0.0.1:${nginx.port}/ingest/x`,
        headers: PLAIN,
        secret: PEER_SECRET,
        close: () => nginx.close(),
      };
    },
  },
  {
    key: 'node',
    label: 'node:http 202',
    async start() {
      const { proc, port } = await forkWithPort('../lib/node202-server.ts');
      return {
        url: `http://127.0.0.1:${port}/ingest/x`,
        headers: PLAIN,
        secret: PEER_SECRET,
        close: () => proc.stop(),
      };
    },
  },
  ...(['node', 'uring'] as const).map((backend) => ({
    key: `ack-${backend}`,
    label: `${backend} backend, raw ack`,
    async start() {
      const { proc, port, backend: ran } = await forkWithPort('../lib/ack-server.ts', [backend]);
      return {
        url: `http://127.0.0.1:${port}/ingest/x`,
        headers: PLAIN,
        secret: PEER_SECRET,
        verify: async () => ({ status: ran === backend ? 'ok' : `ran as ${ran}` }),
        close: () => proc.stop(),
      };
    },
  })),
  {
    key: 'naive',
    label: 'naive: node:http → HMAC → Queue.add',
    async start() {
      const prefix = `bni-${randomBytes(3).toString('hex')}`;
      const secret = randomBytes(20).toString('hex');
      const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 });
      redis.on('error', () => {});
      const queue = new Queue('events', { connection: redis, prefix });
      let proc: Proc | undefined;
      const close = async () => {
        await proc?.stop();
        await queue.close().catch(() => {});
        await deletePrefix(redis as never, prefix).catch(() => {});
        redis.disconnect();
      };
      try {
        const f = await forkWithPort('../lib/naive-ingest.ts', [], {
          ...process.env,
          NAIVE_REDIS_URL: REDIS_URL,
          NAIVE_PREFIX: prefix,
          NAIVE_QUEUE: 'events',
          NAIVE_SECRET: secret,
        });
        proc = f.proc;
        return {
          url: `http://127.0.0.1:${f.port}/ingest/gh`,
          headers: PLAIN,
          secret,
          async verify(acked) {
            const counts = await queue.getJobCounts('waiting', 'prioritized', 'delayed', 'paused');
            const jobs = Object.values(counts).reduce((a, b) => a + b, 0);
            return jobs >= acked
              ? { status: 'ok, durable' }
              : {
                  status: `only ${jobs}/${acked} jobs`,
                  note: `naive: ${acked} acknowledged, ${jobs} jobs queued.`,
                };
          },
          close,
        };
      } catch (err) {
        await close();
        throw err;
      }
    },
  },
  { key: 'spw-node', label: 'Spillway ingest (node)', start: spillwayTarget('node', 'ingest') },
  { key: 'spw-uring', label: 'Spillway ingest (uring)', start: spillwayTarget('uring', 'ingest') },
  { key: 'spw-all', label: 'Spillway `spillway start` (all roles)', start: spillwayTarget('auto', 'all') },
  {
    key: 'nginx-tls',
    label: 'nginx return 202 over TLS',
    async start() {
      const c = tlsCerts();
      const nginx = await startNginx(1, { certPath: c.certPath, keyPath: c.keyPath, ca: c.ca });
      return {
        url: `https://127.0.0.1:${nginx.port}/ingest/x`,
        headers: PLAIN,
        secret: PEER_SECRET,
        close: () => nginx.close(),
      };
    },
  },
  // The default backend on a kernel that allows io_uring; TLS connections leave the ring for the
  // node front door (docs/ingest.md, "One port"), so this row is node:tls + the full pipeline.
  { key: 'spw-tls', label: 'Spillway ingest over TLS', start: spillwayTarget('uring', 'ingest', true) },
];

/** Rows over TLS are compared with nginx over TLS, the others with nginx in the clear. */
const nginxPeer = (key: string) => (key.endsWith('-tls') && key !== 'nginx-tls' ? 'nginx-tls' : 'nginx');

export const ingest: Benchmark = {
  name: 'ingest',
  title: 'Ingest ceiling',
  method:
    'wrk (1 thread, 64 connections, keep-alive) POSTs a distinct 1 KiB JSON body per request (it carries the delivery id), signed with X-Hub-Signature-256, with its own X-GitHub-Delivery: Spillway deduplicates GitHub bodies on sha256(body), so a fixed body would measure its duplicate path. The signatures are precomputed in node for every request of a run (pool: 3 × the warm-up rate × the run length; a run that outgrows it fails its row); every answer that is not 202 fails the row. Peers: nginx `return 202` (1 worker), a node:http server that reads the body and answers 202, the two Spillway IngestServer backends with a handler that only reads the body and answers 202 (raw ack), nginx `return 202` over TLS (TLS 1.3, a P-256 certificate from a test CA; the peer of the TLS row), and the receiver a team writes in an afternoon ("naive"): node:http reads the body, verifies X-Hub-Signature-256 (HMAC-SHA256, constant-time compare), `Queue.add`s one BullMQ job per event (jobId = delivery id) into the project Redis and answers 202 once Redis has it. Spillway: one `spillway start --role ingest` process per backend (`SPILLWAY_INGEST_BACKEND=node|uring`) on the full verified and durable path against the project Redis (AOF everysec), and `spillway start` with every role in one process (`SPILLWAY_INGEST_BACKEND` at its default, as a new user runs it: io_uring where the kernel allows it, and the notes say which backend took each round; node:http until 2026-12-07; the tenant has one endpoint on a local sink, so its worker delivers what arrives while ingest is measured) — what a new user runs first; and "Spillway ingest over TLS": the ingest role (uring backend; TLS connections are served by its node half) with SPILLWAY_TLS_CERT/KEY, wrk over HTTPS (HTTP/1.1, keep-alive), compared with nginx over TLS. Each target is its own process, started fresh for each measurement and given a discarded warm-up run first. Rounds: 3 (`--quick` 2); each round measures every target once, in order. Full: 10 s per target per round; `--quick`: 3 s. "durable" = every acknowledged delivery id is among the tenant\'s dedup fingerprints (Spillway; the entry counts of its fingerprint slots) or has its job (naive) in Redis after the run. The verdicts use the worst round\'s ratio.',
  targets: [
    'Spillway ingest (node backend) ≥ 50 % of nginx `return 202` req/s (worst round).',
    'uring backend ≥ 1.5 × node backend req/s (full pipeline; the raw-ack rows show the backends alone) (worst round).',
  ],
  async run({ quick, rounds, log, round }) {
    const durationS = quick ? 3 : 10;
    const warmS = quick ? 1 : 2;
    const conns = 64;
    const notes: string[] = [];
    const runTag = `b${Date.now().toString(36)}`;
    const results: Record<string, { r?: WrkResult; status: string }[]> = {};
    let bestRps = 0;
    for (const t of TARGETS) results[t.key] = [];
    for (let n = 1; n <= rounds; n++) {
      round(n);
      for (const spec of TARGETS) {
        const tag = `${runTag}r${n}${spec.key}`;
        let target: Target | undefined;
        try {
          target = await spec.start(tag);
          // wrk run tags are [a-z0-9]{1,16}: the run, the round, the target's index, the phase.
          const short = `${runTag.slice(-8)}${n}${TARGETS.indexOf(spec)}`;
          const base = {
            url: target.url,
            headers: target.headers,
            secret: target.secret,
            threads: 1,
            connections: conns,
          };
          const warmCount = Math.ceil(Math.max(CEILING_RPS, 2 * bestRps) * warmS);
          const warm = await runWrk({ ...base, count: warmCount, runTag: `${short}w`, durationS: warmS });
          const count = Math.ceil(Math.max(MIN_RPS, MARGIN * (warm.rps || 0)) * durationS);
          const r = await runWrk({ ...base, count, runTag: `${short}m`, durationS });
          bestRps = Math.max(bestRps, warm.rps || 0, r.rps || 0);
          const acked = (target.probes ?? 0) + warm.requests - warm.non202 + r.requests - r.non202;
          const v = target.verify ? await target.verify(acked) : { status: 'ok' };
          if (v.note) notes.push(`${spec.label}, round ${n}: ${v.note}`);
          const bad: string[] = [];
          if (r.non202 > 0 || warm.non202 > 0)
            bad.push(`${r.non202} non-202 (warm-up ${warm.non202}; a 200 is the duplicate path)`);
          if (r.exhausted > 0) bad.push(`${r.exhausted} past the precomputed pool`);
          if (bad.length > 0) {
            v.status = `FAIL: ${bad.join(', ')}`;
            notes.push(`${spec.label}, round ${n}: ${bad.join(', ')}.`);
          }
          log(
            `round ${n} ${spec.label}: ${r.rps.toFixed(0)} req/s p50 ${r.p50Ms} ms p99 ${r.p99Ms} ms non-202 ${r.non202}; pool ${count}, past it ${r.exhausted}; ${v.status}`,
          );
          results[spec.key]!.push({ r, status: v.status });
        } catch (err) {
          const msg = (err as Error).message.split('\n')[0]!;
          results[spec.key]!.push({ status: 'failed' });
          notes.push(`${spec.label}, round ${n}: ${msg}`);
          log(`round ${n} ${spec.label}: failed: ${msg}`);
        } finally {
          await target?.close().catch(() => {});
        }
      }
    }

    const redisAof = await (async () => {
      const c = new SpillwayCluster('bi');
      try {
        const [, aof] = (await c.redis.config('GET', 'appendonly')) as string[];
        const [, fsync] = (await c.redis.config('GET', 'appendfsync')) as string[];
        return `appendonly ${aof}, appendfsync ${fsync}`;
      } finally {
        await c.close({ keepData: true });
      }
    })().catch(() => 'unknown');
    notes.push(`Redis under test: ${redisAof}.`);

    const rps = (k: string) => results[k]!.map((x) => (x.r ? x.r.rps : undefined));
    const ratio = (a: string, b: string) => spread(perRound(rps(a), rps(b)), 'higher');
    const rows: Row[] = TARGETS.map((t) => {
      const s = spread(rps(t.key), 'higher');
      const p99 = spread(
        results[t.key]!.map((x) => x.r?.p99Ms),
        'lower',
      );
      const vsNginx = ratio(t.key, nginxPeer(t.key));
      const vsNaive = t.key.startsWith('spw') ? ratio(t.key, 'naive') : undefined;
      const statuses = [...new Set(results[t.key]!.map((x) => x.status))];
      return {
        label: t.label,
        values: {
          rps: s?.median,
          worst: s?.worst,
          p99: p99?.median,
          non2xx: results[t.key]!.reduce((a, x) => a + (x.r ? x.r.non202 + x.r.socketErrors : 0), 0),
          vsNginx: vsNginx?.median,
          vsNginxWorst: vsNginx?.worst,
          vsNaive: vsNaive?.median,
          vsNaiveWorst: vsNaive?.worst,
          rounds: roundsCell(rps(t.key)),
          status: statuses.join('; '),
        },
      };
    });
    const goal = (what: string, target: number, s: Spread | undefined): Goal => ({
      what: `${what} (${worstOf(s, quick)})`,
      target: `≥ ${target.toFixed(2)}`,
      measured: s?.worst,
      shown: s ? `worst ${s.worst.toFixed(2)}, median ${s.median.toFixed(2)}` : undefined,
      pass: s === undefined ? undefined : s.worst >= target,
    });
    certs?.remove();
    certs = undefined;
    const spwNode = ratio('spw-node', 'nginx');
    const tlsVsNginx = ratio('spw-tls', 'nginx-tls');
    if (tlsVsNginx)
      notes.push(
        `Spillway ingest over TLS ÷ nginx return 202 over TLS (the "÷ nginx" cells of that row): median ${tlsVsNginx.median.toFixed(2)}, worst ${tlsVsNginx.worst.toFixed(2)}; nginx over TLS ÷ nginx in the clear: ${ratio('nginx-tls', 'nginx')?.median.toFixed(2) ?? '?'}.`,
      );
    const goals: Goal[] = [
      goal('Spillway (node) ÷ nginx req/s', 0.5, spwNode),
      goal('uring ÷ node req/s (full pipeline)', 1.5, ratio('spw-uring', 'spw-node')),
      goal('uring ÷ node req/s (raw ack, backends alone)', 1.5, ratio('ack-uring', 'ack-node')),
    ];
    return {
      status: spwNode && ratio('spw-uring', 'nginx') ? 'ok' : 'partial',
      columns: [
        { key: 'rps', header: 'req/s median' },
        { key: 'worst', header: 'worst' },
        { key: 'p99', header: 'p99 ms median', digits: 2 },
        { key: 'non2xx', header: 'non-202' },
        { key: 'vsNginx', header: '÷ nginx median', digits: 2 },
        { key: 'vsNginxWorst', header: 'worst', digits: 2 },
        { key: 'vsNaive', header: '÷ naive median', digits: 2 },
        { key: 'vsNaiveWorst', header: 'worst', digits: 2 },
        { key: 'rounds', header: 'req/s per round' },
        { key: 'status', header: 'status' },
      ],
      rows,
      goals,
      notes,
      chart: { key: 'rps', unit: 'req/s, median of rounds (higher is better)' },
    };
  },
};

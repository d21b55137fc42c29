/**
 * Fan-out delivery: deliveries per second from the durable intake to a local sink through one
 * Spillway worker process, with 1 and 10 subscribed endpoints per event, against two peers driving
 * the same sink in the same run: a raw undici Pool (the machine's limit) and the design a team
 * writes instead (one BullMQ job per delivery, a worker that signs and POSTs). Every case runs in
 * rounds; the verdicts use the worst round.
 */
import { randomBytes } from 'node:crypto';
import type { Endpoint } from '@spillway/shared';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { Pool } from 'undici';
import { waitFor } from '../../helpers/wait.ts';
import { forkTs, type ProcStat, procStatOf } from '../lib/procs.ts';
import type { Goal, Row } from '../lib/report.ts';
import { type Sink, startSink } from '../lib/sink.ts';
import {
  deletePrefix,
  eventBody,
  openIntake,
  REDIS_URL,
  redisCommands,
  redisCpuMicros,
  SpillwayCluster,
} from '../lib/spillway.ts';
import { perRound, roundsCell, type Spread, spread, worstOf } from '../lib/spread.ts';
import type { Benchmark } from './types.ts';

/** As many as requests in flight: the sockets Spillway opens for a tenant of concurrency 64. */
const CONNECTIONS = 64;
const IN_FLIGHT = 64;
const BODY_BYTES = 256;

interface CaseResult {
  rate?: number;
  /** Deliveries ÷ time from the worker's resume to the last arrival (claim latency included). */
  fromStart?: number;
  delivered?: string;
  /** Arrivals beyond the expected count: the same delivery sent twice (at-least-once redelivery). */
  extra?: number;
  /** Preload (not part of the timed drain): jobs or events enqueued per second. */
  preload?: number;
  /** Redis commands the worker caused from its start to the last delivery, per delivery. */
  redis?: number;
  /** Worker CPU µs (user + system) per delivery. */
  cpuUs?: number;
  /** The worker's minor page faults per delivery over the timed drain. */
  faults?: number;
  /** The Redis server's CPU per delivery over the timed drain, µs. */
  redisUs?: number;
  /** The warm-up drain's rate: a worker just started, its code not yet optimised. */
  cold?: number;
  ok: boolean;
  note?: string;
}

/** Raw undici, closed loop with IN_FLIGHT requests outstanding; rate after a warm-up. */
async function rawUndici(sink: Sink, durationMs: number, warmMs: number): Promise<CaseResult> {
  const pool = new Pool(`http://127.0.0.1:${sink.port}`, { connections: CONNECTIONS });
  const body = eventBody(BODY_BYTES);
  let n = 0;
  let markN = 0;
  let markT = 0;
  const t0 = Date.now();
  const worker = async () => {
    while (Date.now() - t0 < durationMs) {
      const r = await pool.request({
        path: '/ok/raw',
        method: 'POST',
        body,
        headers: { 'content-type': 'application/json' },
      });
      await r.body.dump();
      n++;
      if (!markT && Date.now() - t0 >= warmMs) {
        markT = performance.now();
        markN = n;
      }
    }
  };
  await Promise.all(Array.from({ length: IN_FLIGHT }, worker));
  const rate = ((n - markN) * 1000) / (performance.now() - markT);
  await pool.close();
  return { rate, ok: true };
}

/**
 * The worker's own CPU time and minor page faults per delivery between two /proc readings: unlike
 * a rate, CPU per delivery does not shrink or grow with what else the machine runs (its start-up,
 * before the first reading, is not counted).
 */
function perDelivery(
  s0: ProcStat | undefined,
  s1: ProcStat | undefined,
  n: number,
): { cpuUs?: number; faults?: number } {
  if (!s0 || !s1) return {};
  return { cpuUs: (s1.us - s0.us) / n, faults: (s1.minorFaults - s0.minorFaults) / n };
}

/** Deliveries a drain counted (its `delivered` is "<arrived>/<expected>"), at least 1 to divide by. */
function deliveredOf(d: { delivered: string }): number {
  return Math.max(1, Number(d.delivered.split('/')[0]));
}

/** Waits for `expected` arrivals at the sink; the rate is first → last arrival. */
async function drained(sink: Sink, tag: string, expected: number, started: number, quick: boolean) {
  await waitFor(async () => (await sink.stats(tag)).count > 0, 'first delivery', 30_000);
  await waitFor(
    async () => (await sink.stats(tag)).count >= expected,
    'the preload to drain',
    quick ? 60_000 : 180_000,
  ).catch(() => {});
  const st = await sink.stats(tag);
  return {
    rate: (st.count * 1000) / Math.max(1, st.last - st.first),
    fromStart: (st.count * 1000) / Math.max(1, st.last - started),
    delivered: `${st.count}/${expected}`,
    extra: Math.max(0, st.count - expected),
    ok: st.count >= expected,
  };
}

/**
 * Runs `enqueue` with the process frozen (SIGSTOP ... SIGCONT): a warm worker does not start on a
 * preload while it is being written, so the timed drain is a backlog, as for a cold one.
 */
async function frozen(pid: number, enqueue: () => Promise<void>): Promise<void> {
  process.kill(pid, 'SIGSTOP');
  try {
    await enqueue();
  } finally {
    process.kill(pid, 'SIGCONT');
  }
}

/**
 * The naive design: one BullMQ job per delivery in the project Redis, drained by a worker process
 * (lib/naive-worker.ts: concurrency 64, Standard Webhooks HMAC, undici Pool of 16). Warmed like
 * Spillway's worker: an untimed drain of the same preload first.
 */
async function naive(sink: Sink, deliveries: number, tag: string, quick: boolean): Promise<CaseResult> {
  const prefix = `bnv-${randomBytes(3).toString('hex')}`;
  const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 });
  redis.on('error', () => {});
  const queue = new Queue('deliveries', { connection: redis, prefix });
  const secret = `whsec_${randomBytes(24).toString('base64')}`;
  let proc: ReturnType<typeof forkTs> | undefined;
  try {
    const url = sink.url('ok', tag);
    const body = eventBody(BODY_BYTES).toString('utf8');
    const enqueue = async () => {
      for (let i = 0; i < deliveries; i += 1000) {
        const n = Math.min(1000, deliveries - i);
        await queue.addBulk(Array.from({ length: n }, () => ({ name: 'd', data: { url, secret, body } })));
      }
    };
    proc = forkTs(new URL('../lib/naive-worker.ts', import.meta.url), [], {
      ...process.env,
      NAIVE_REDIS_URL: REDIS_URL,
      NAIVE_PREFIX: prefix,
      NAIVE_QUEUE: 'deliveries',
      NAIVE_CONCURRENCY: String(IN_FLIGHT),
      NAIVE_CONNECTIONS: String(CONNECTIONS),
    });
    const p = proc;
    await new Promise<void>((resolve, reject) => {
      p.child.once('message', () => resolve());
      p.child.once('exit', (c) =>
        reject(new Error(`naive worker exited ${c}: ${p.err().trim().slice(-300)}`)),
      );
    });
    const cold = await warmUp(sink, tag, deliveries, enqueue);
    let preload = 0;
    await frozen(p.pid, async () => {
      const t0 = performance.now();
      await enqueue();
      preload = (deliveries * 1000) / (performance.now() - t0);
    });
    const started = performance.timeOrigin + performance.now();
    const s0 = await procStatOf(p.pid);
    const d = await drained(sink, tag, deliveries, started, quick);
    return { ...d, ...perDelivery(s0, await procStatOf(p.pid), deliveredOf(d)), preload, cold };
  } finally {
    await proc?.stop(5000);
    await queue.close().catch(() => {});
    await deletePrefix(redis as never, prefix).catch(() => {});
    redis.disconnect();
  }
}

/**
 * The warm-up: the same preload once, drained by the just-started worker, so the timed drain
 * measures a JIT-compiled, connected worker, as the raw peer is measured after its warm-up. Its
 * rate (first to last arrival) is the "cold worker" column. Then the sink forgets the tag.
 */
async function warmUp(
  sink: Sink,
  tag: string,
  deliveries: number,
  enqueue: () => Promise<void>,
): Promise<number> {
  await enqueue();
  await waitFor(async () => (await sink.stats(tag)).count >= deliveries, 'the warm-up to drain', 180_000);
  const st = await sink.stats(tag);
  await sink.reset(tag);
  return (st.count * 1000) / Math.max(1, st.last - st.first);
}

/**
 * One `spillway start --role worker` process (of `sc.bin`'s checkout when given) draining a preload
 * from the durable intake.
 */
async function spillway(
  sink: Sink,
  sc: SpillwayCase,
  deliveries: number,
  tag: string,
  quick: boolean,
): Promise<CaseResult> {
  const { perEvent, endpoint: endpointExtra = {}, bin } = sc;
  const c = new SpillwayCluster('bf', bin === undefined ? {} : { bin });
  let feeder: Awaited<ReturnType<typeof openIntake>> | undefined;
  try {
    const events = deliveries / perEvent;
    // Credits cover the whole preload so nothing spills: this measures the hot path.
    await c.tenant('acme', { maxInFlight: deliveries + 1000, concurrency: IN_FLIGHT });
    for (let e = 0; e < perEvent; e++)
      await c.endpoint('acme', `ep${e}`, `${sink.url('ok', tag)}/e${e}`, endpointExtra);
    feeder = await openIntake(c);
    const f = feeder;
    const enqueue = async () => {
      for (let i = 0; i < events; i += 500) {
        const jobs: Promise<unknown>[] = [];
        for (let j = i; j < Math.min(events, i + 500); j++) jobs.push(f.submit('acme', BODY_BYTES));
        await Promise.all(jobs);
      }
    };
    const w = await c.startRole('worker');
    const cold = await warmUp(sink, tag, deliveries, enqueue);
    let preload = 0;
    let cmds0 = 0;
    let redisCpu0 = 0;
    await frozen(w.proc.pid, async () => {
      const t0 = performance.now();
      await enqueue();
      preload = (events * 1000) / (performance.now() - t0);
      cmds0 = await redisCommands(c);
      redisCpu0 = await redisCpuMicros(c);
    });
    const started = performance.timeOrigin + performance.now();
    const s0 = await procStatOf(w.proc.pid);
    const d = await drained(sink, tag, deliveries, started, quick);
    const s1 = await procStatOf(w.proc.pid);
    // Every command the Redis server processed while the worker drained the timed preload (job
    // claims and locks, records, counters, limiter, stats), per delivery; nothing else uses this
    // Redis meanwhile.
    const n = deliveredOf(d);
    const redis = ((await redisCommands(c)) - cmds0) / n;
    const redisUs = ((await redisCpuMicros(c)) - redisCpu0) / n;
    return { ...d, ...perDelivery(s0, s1, n), preload, redis, redisUs, cold };
  } finally {
    await feeder?.close().catch(() => {});
    await c.close();
  }
}

/**
 * SPILLWAY_BENCH_COMPARE_BIN=<checkout>/packages/router/bin/spillway.mjs: each round also runs the
 * 1- and 10-endpoint cases on that (built) checkout's worker, right after this tree's, against the
 * same sink and raw peer, so two trees are compared within one run (docs/benchmarks/profile.md).
 */
const COMPARE_BIN = process.env.SPILLWAY_BENCH_COMPARE_BIN;
/** The batched case's endpoint: 10 events per request (the sink counts the events of each). */
const BATCH_10: Partial<Endpoint> = { batch: { maxEvents: 10, maxBytes: 1_048_576, lingerMs: 20 } };
/** The mean of the measured rates among `xs` (undefined if none was measured). */
function meanOf(xs: (number | undefined)[]): number | undefined {
  const ok = xs.filter((x): x is number => x !== undefined);
  return ok.length ? ok.reduce((a, x) => a + x, 0) / ok.length : undefined;
}

type CaseKey = 'raw' | 'naive' | 'spw1' | 'spw10' | 'spwBatch' | 'cmp1' | 'cmp10';
/** A Spillway case: endpoints per event, the sink tag's prefix, endpoint options, which checkout. */
interface SpillwayCase {
  perEvent: number;
  tag: string;
  endpoint?: Partial<Endpoint>;
  bin?: string;
}
const ALL_CASES: readonly { key: CaseKey; label: string; spillway?: SpillwayCase }[] = [
  { key: 'raw', label: 'raw undici Pool' },
  { key: 'naive', label: 'naive: BullMQ job per delivery' },
  { key: 'spw1', label: 'Spillway, 1 endpoint/event', spillway: { perEvent: 1, tag: 'f1' } },
  {
    key: 'cmp1',
    label: 'compare tree, 1 endpoint/event',
    spillway: { perEvent: 1, tag: 'c1', bin: COMPARE_BIN },
  },
  { key: 'spw10', label: 'Spillway, 10 endpoints/event', spillway: { perEvent: 10, tag: 'f10' } },
  {
    key: 'cmp10',
    label: 'compare tree, 10 endpoints/event',
    spillway: { perEvent: 10, tag: 'c10', bin: COMPARE_BIN },
  },
  {
    key: 'spwBatch',
    label: 'Spillway, batched 10 events per request',
    spillway: { perEvent: 1, tag: 'fb', endpoint: BATCH_10 },
  },
];
/** SPILLWAY_BENCH_CASES=raw,spw1,...: only those cases (a profiling or comparison run). */
const ONLY_CASES = process.env.SPILLWAY_BENCH_CASES?.split(',');
/** The compare rows only when SPILLWAY_BENCH_COMPARE_BIN names a checkout; only ONLY_CASES if given. */
const CASES = ALL_CASES.filter(
  (cs) =>
    (COMPARE_BIN !== undefined || !cs.key.startsWith('cmp')) &&
    (ONLY_CASES === undefined || ONLY_CASES.includes(cs.key)),
);
/**
 * The order a round runs its cases in (the table keeps CASES' order): the naive design first, then
 * the Spillway cases, each BRACKETED by the raw peer: raw runs right before every Spillway case and
 * once more after the last one, and a Spillway case is divided by the mean of the two raw rates
 * around it. This VM's speed moves by a third over tens of seconds (a round's worker CPU per
 * delivery 73 → 113 µs, the Redis server's 7 → 10 µs, with nothing else changed): a peer measured
 * only before a case missed a slow stretch that began during it, and one measured only after would
 * miss one that ended during it. The bracket's two raw rates are in the notes, per case and round.
 */
const RUN_ORDER: readonly CaseKey[] = ['naive', 'spw1', 'cmp1', 'spw10', 'cmp10', 'spwBatch'];
/**
 * CASES but the raw peer (it runs around each Spillway case), in RUN_ORDER: sorted, not filtered
 * by it, so a case missing from it still runs (first).
 */
const RUN_CASES = [...CASES]
  .filter((cs) => cs.key !== 'raw')
  .sort((a, b) => RUN_ORDER.indexOf(a.key) - RUN_ORDER.indexOf(b.key));
/** Whether the raw peer runs at all (it is a case like the others for SPILLWAY_BENCH_CASES). */
const RAW = CASES.some((cs) => cs.key === 'raw');

export const fanout: Benchmark = {
  name: 'fanout',
  title: 'Fan-out delivery',
  method: `Every case POSTs the same ${BODY_BYTES}-byte body to the same node:http sink process (answers 200), in the same run, in rounds (3; \`--quick\` 2): each round measures every case once, the naive design first, and brackets every Spillway case with the raw peer: raw runs right before each Spillway case and once after the last, and a Spillway case's rate is divided by the mean of the two raw rates around it (this VM's speed moves by a third over tens of seconds; the notes give both raw rates of every bracket). Peer 1, the machine's limit: a raw undici Pool (${CONNECTIONS} connections, ${IN_FLIGHT} requests in flight, closed loop; 8 s, the rate of the last 6 s; \`--quick\` 4 s and 2.5 s); its row is the mean of a round's raw measurements. Peer 2, the design a team writes in an afternoon ("naive"): a preload of one BullMQ job per delivery in the project Redis, then a worker process (BullMQ Worker, concurrency ${IN_FLIGHT}) that signs each body Standard Webhooks style (\`standardwebhooks\`: webhook-id, webhook-timestamp, HMAC-SHA256 webhook-signature) and POSTs it with an undici Pool (${CONNECTIONS} connections); completed jobs removed. Spillway: one \`spillway start --role worker\` process; a preload of events is enqueued through the router's durable intake (group-committed BullMQ batches in Redis) and the worker drains it: intake job → fan-out → credit queue → signed undici delivery. Both workers (naive and Spillway) are started first and drain the same preload once, untimed, as a warm-up (its rate is the "cold worker" column); then the worker process is frozen (SIGSTOP) while the timed preload is enqueued, and resumed (SIGCONT): the timed drain is a backlog drained by a warm worker, as the raw peer is measured after its warm-up. The tenant's credits cover the whole preload so nothing spills (the spill path is the backlog benchmark); tenant concurrency ${IN_FLIGHT}, so ${CONNECTIONS} connections per origin (the delivery default: as many as the tenant's concurrency, up to 64; the peers use as many). Rate = deliveries ÷ time between the first and the last arrival at the sink; "from resume" counts from the SIGCONT. Neither preload is timed (the notes give their rates): the naive design's fan-out (one job per delivery) happens in its preload, Spillway's inside the timed drain, so at 10 endpoints/event the comparison leans towards the naive design. The batched case is the 1 endpoint/event case with the endpoint's \`batch\` set to 10 events per request (lingerMs 20): one signed JSON array per request, its rate counted in events. Full: 60 000 deliveries per case per round (and as many in its warm-up); \`--quick\`: 6 000. The table shows the median and the worst round and every round's rate; the verdicts use the worst round's ratio.`,
  targets: [
    'Spillway deliveries/s ≥ 40 % of raw undici to the same sink (worst round).',
    'Spillway deliveries/s ≥ 3 × the naive design (BullMQ job per delivery, worker concurrency 64, HMAC-signed, same sink and pool) (worst round).',
  ],
  async run({ quick, rounds, log, round }) {
    // Each bracket's raw peer: short, since a round measures it once per Spillway case plus once.
    const durationMs = quick ? 4000 : 8000;
    const warmMs = quick ? 1500 : 2000;
    const deliveries = quick ? 6000 : 60_000;
    const notes: string[] = [];
    const samples = Object.fromEntries(ALL_CASES.map((cs) => [cs.key, [] as CaseResult[]])) as Record<
      CaseKey,
      CaseResult[]
    >;
    /** Per round, the raw peer's rates in the order they were measured. */
    const rawSeq: (number | undefined)[][] = [];
    /** Per Spillway case and round, the index in rawSeq of the raw run right before it. */
    const rawAt = Object.fromEntries(ALL_CASES.map((cs) => [cs.key, [] as number[]])) as Record<
      CaseKey,
      number[]
    >;
    /** A Spillway case's bracket in round i: the raw rates right before and right after it. */
    const bracketOf = (k: CaseKey, i: number) => {
      const at = rawAt[k][i];
      return at === undefined ? [] : [rawSeq[i]?.[at], rawSeq[i]?.[at + 1]];
    };
    const sink = await startSink();
    try {
      for (let r = 1; r <= rounds; r++) {
        round(r);
        // The round's raw measurements in order: each Spillway case's bracket is the one before
        // it and the next one (before the next Spillway case, or after the last).
        const raws: (number | undefined)[] = [];
        rawSeq.push(raws);
        const raw = async (why: string) => {
          let res: CaseResult;
          try {
            res = await rawUndici(sink, durationMs, warmMs);
          } catch (err) {
            res = { ok: false, note: (err as Error).message.split('\n')[0] };
            notes.push(`raw undici Pool, round ${r}: ${res.note}`);
          }
          raws.push(res.rate);
          log(
            `round ${r} raw undici Pool (${why}): ${res.rate === undefined ? 'not measured' : `${res.rate.toFixed(0)} deliveries/s`}`,
          );
        };
        for (const cs of RUN_CASES) {
          let res: CaseResult;
          const sc = cs.spillway;
          if (sc && RAW) {
            rawAt[cs.key][r - 1] = raws.length;
            await raw(`before ${cs.label}`);
          }
          try {
            if (sc) res = await spillway(sink, sc, deliveries, `${sc.tag}-r${r}`, quick);
            else res = await naive(sink, deliveries, `naive-r${r}`, quick);
          } catch (err) {
            res = { ok: false, note: (err as Error).message.split('\n')[0] };
            notes.push(`${cs.label}, round ${r}: ${res.note}`);
          }
          samples[cs.key].push(res);
          log(
            `round ${r} ${cs.label}: ${res.rate === undefined ? 'not measured' : `${res.rate.toFixed(0)} deliveries/s`}${res.fromStart ? ` (${res.fromStart.toFixed(0)}/s from resume)` : ''}${res.cold ? `, cold worker ${res.cold.toFixed(0)}/s` : ''}${res.delivered ? `; ${res.delivered}` : ''}${res.cpuUs === undefined ? '' : `; worker ${res.cpuUs.toFixed(0)} µs CPU/delivery`}${res.redisUs === undefined ? '' : `, Redis ${res.redisUs.toFixed(1)} µs`}`,
          );
        }
        if (RAW) await raw(raws.length ? 'after the last Spillway case' : 'the only case');
        // The raw row: the mean of the round's raw measurements.
        const mean = meanOf(raws);
        samples.raw.push(
          mean === undefined ? { ok: false, note: 'no raw measurement' } : { ok: true, rate: mean },
        );
      }
    } finally {
      await sink.close();
    }
    const rates = (k: CaseKey) => samples[k].map((s) => s.rate);
    // A Spillway case's peer in a round: the mean of its bracket (either side alone if the other
    // failed); the raw row and the naive design's: the round's mean raw rate.
    const peerOf = (k: CaseKey) =>
      ALL_CASES.find((cs) => cs.key === k)?.spillway
        ? samples[k].map((_, i) => meanOf(bracketOf(k, i)))
        : rates('raw');
    const vsRaw = (k: CaseKey) => spread(perRound(rates(k), peerOf(k)), 'higher');
    const vsNaive = (k: CaseKey) => spread(perRound(rates(k), rates('naive')), 'higher');
    const rows: Row[] = CASES.map((cs) => {
      const s = spread(rates(cs.key), 'higher');
      const start = spread(
        samples[cs.key].map((x) => x.fromStart),
        'higher',
      );
      const bad = samples[cs.key].findIndex((x) => !x.ok);
      const extra = samples[cs.key].reduce((a, x) => a + (x.extra ?? 0), 0);
      return {
        label: cs.label,
        values: {
          deliveries: s?.median,
          worst: s?.worst,
          vsRaw: vsRaw(cs.key)?.median,
          vsRawWorst: vsRaw(cs.key)?.worst,
          vsNaive: cs.key === 'raw' ? undefined : vsNaive(cs.key)?.median,
          vsNaiveWorst: cs.key === 'raw' ? undefined : vsNaive(cs.key)?.worst,
          fromStart: start?.median,
          cold: spread(
            samples[cs.key].map((x) => x.cold),
            'higher',
          )?.median,
          rounds: roundsCell(rates(cs.key)),
          redis: spread(
            samples[cs.key].map((x) => x.redis),
            'lower',
          )?.median,
          cpuUs: spread(
            samples[cs.key].map((x) => x.cpuUs),
            'lower',
          )?.median,
          redisUs: spread(
            samples[cs.key].map((x) => x.redisUs),
            'lower',
          )?.median,
          faults: spread(
            samples[cs.key].map((x) => x.faults),
            'lower',
          )?.median,
          status:
            (bad < 0 ? 'ok' : `round ${bad + 1}: ${samples[cs.key][bad]!.delivered ?? 'failed'}`) +
            (extra ? `, ${extra} extra (duplicate) arrivals` : ''),
        },
      };
    });
    if (COMPARE_BIN)
      for (const [what, cmp, own] of [
        ['1 endpoint/event', 'cmp1', 'spw1'],
        ['10 endpoints/event', 'cmp10', 'spw10'],
      ] as const) {
        const per = perRound(rates(cmp), rates(own));
        const s = spread(per, 'higher');
        notes.push(
          `compare tree (${COMPARE_BIN}) ÷ this tree, ${what}, same round: median ${s?.median.toFixed(2) ?? '—'}, worst ${s?.worst.toFixed(2) ?? '—'} (per round: ${per.map((x) => x?.toFixed(2) ?? '—').join(' / ')}).`,
        );
      }
    const pre = (k: CaseKey) =>
      spread(
        samples[k].map((x) => x.preload),
        'higher',
      )?.median;
    if (RAW) {
      const f = (x: number | undefined) => (x === undefined ? '—' : x.toFixed(0));
      notes.push(
        `raw undici Pool measurements per round, in the order they ran (before each Spillway case, then after the last): ${rawSeq.map((xs, i) => `round ${i + 1}: ${xs.map(f).join(' → ')}`).join('; ')}.`,
      );
      for (const cs of RUN_CASES.filter((c) => c.spillway)) {
        const ratios = perRound(rates(cs.key), peerOf(cs.key));
        notes.push(
          `${cs.label} ÷ raw, per round, with the raw rates before / after it: ${ratios
            .map((x, i) => {
              const [before, after] = bracketOf(cs.key, i);
              return `${x === undefined ? '—' : x.toFixed(2)} (${f(before)} / ${f(after)})`;
            })
            .join(', ')}.`,
        );
      }
    }
    const batchedVsOne = spread(perRound(rates('spwBatch'), rates('spw1')), 'higher');
    notes.push(
      `batched (10 events per request, one endpoint) ÷ unbatched (1 endpoint/event) delivered events/s: median ${batchedVsOne?.median.toFixed(2) ?? '—'}, worst ${batchedVsOne?.worst.toFixed(2) ?? '—'}; the sink counts each request's \`spillway-batch-count\` events, and "deliveries" in this table are events delivered.`,
    );
    notes.push(
      `preload, not part of the timed drain (median of rounds): naive ${pre('naive')?.toFixed(0) ?? '—'} jobs/s (one per delivery: the naive design's fan-out happens here), Spillway ${pre('spw1')?.toFixed(0) ?? '—'} events/s at 1 endpoint/event and ${pre('spw10')?.toFixed(0) ?? '—'} events/s at 10 (its fan-out happens in the timed drain).`,
    );
    const goal = (what: string, target: number, s: Spread | undefined): Goal => ({
      what: `${what} (${worstOf(s, quick)})`,
      target: `≥ ${target.toFixed(2)}`,
      measured: s?.worst,
      shown: s ? `worst ${s.worst.toFixed(2)}, median ${s.median.toFixed(2)}` : undefined,
      pass: s === undefined ? undefined : s.worst >= target,
    });
    const goals: Goal[] = [
      goal('Spillway 1 endpoint/event ÷ raw undici deliveries/s', 0.4, vsRaw('spw1')),
      goal('Spillway 1 endpoint/event ÷ naive BullMQ job per delivery', 3, vsNaive('spw1')),
      goal('Spillway 10 endpoints/event ÷ raw undici deliveries/s', 0.4, vsRaw('spw10')),
      goal('Spillway 10 endpoints/event ÷ naive BullMQ job per delivery', 3, vsNaive('spw10')),
    ];
    const measuredAll = CASES.every((cs) => samples[cs.key].some((x) => x.rate !== undefined));
    return {
      status: measuredAll ? 'ok' : 'partial',
      columns: [
        { key: 'deliveries', header: 'deliveries/s median' },
        { key: 'worst', header: 'worst' },
        { key: 'vsRaw', header: '÷ raw undici median', digits: 2 },
        { key: 'vsRawWorst', header: 'worst', digits: 2 },
        { key: 'vsNaive', header: '÷ naive median', digits: 2 },
        { key: 'vsNaiveWorst', header: 'worst', digits: 2 },
        { key: 'fromStart', header: 'from resume /s' },
        { key: 'cold', header: 'cold worker /s' },
        { key: 'rounds', header: 'deliveries/s per round' },
        { key: 'redis', header: 'Redis calls/delivery', digits: 3 },
        { key: 'cpuUs', header: 'worker CPU µs/delivery', digits: 0 },
        { key: 'redisUs', header: 'Redis CPU µs/delivery', digits: 1 },
        { key: 'faults', header: 'worker page faults/delivery', digits: 2 },
        { key: 'status', header: 'status' },
      ],
      rows,
      goals,
      notes,
      chart: { key: 'deliveries', unit: 'deliveries/s, median of rounds (higher is better)' },
    };
  },
};

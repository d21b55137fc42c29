/**
 * `pnpm lab [--short]`: Spillway scaled out on the real distributed engines — a 3-broker KRaft Kafka
 * (spill topic at RF 3, min ISR 2) and a Redis Cluster of 3 masters + 3 replicas, all on loopback
 * ports of the lab's own — with 2 ingest, 3 worker and 1 admin processes under steady provider
 * load. One fault at a time: kill -9 a Kafka broker (restarted after 20 s), fail over the Redis
 * master of the intake queue's slot (kill -9; its replica is promoted), kill -9 a worker, kill -9 an
 * ingest process (each restarted after 5 s, as a supervisor would). Per fault it prints events
 * accepted, delivered and lost, 503s, and the time to recover; then the scaling curve (deliveries/s
 * and worker CPU per delivery with 1, 2 and 3 workers). `--short` (CI): the broker kill and the Redis
 * failover only, no curve. Exits 1 if any acknowledged event was lost.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { fingerprint } from '@spillway/router/testing';
import { createKeys, type Source } from '@spillway/shared';
import { Redis } from 'ioredis';
import { Kafka, logLevel } from 'kafkajs';
import { type Sink, startSink } from '../bench/lib/sink.ts';
import { type RoleProc, SpillwayCluster } from '../bench/lib/spillway.ts';
import { withKafkaAdmin } from '../helpers/kafka-broker.ts';
import { freePort } from '../helpers/ports.ts';
import { sleep, waitFor } from '../helpers/wait.ts';
import { LabKafka, LabRedisCluster } from './cluster.ts';
import { Load } from './load.ts';

const short = process.argv.includes('--short');
const RATE = Number(process.env.SPILLWAY_LAB_RATE ?? (short ? 150 : 200));
const PARTITIONS = 6;
const t00 = Date.now();
const log = (m: string) => process.stdout.write(`[lab +${((Date.now() - t00) / 1000).toFixed(0)}s] ${m}\n`);

export interface FaultRow {
  fault: string;
  accepted: number;
  delivered: number;
  lost: number;
  duplicates: number;
  s503: number;
  errors: number;
  /** Seconds from the fault until ingest accepted ≥ 90 % again (3 s in a row). */
  ingestRecoveredS: number | undefined;
  /** Seconds from the fault until deliveries caught up with acceptance again. */
  deliveryCaughtUpS: number | undefined;
  note: string;
}

export interface ScalePoint {
  workers: number;
  events: number;
  /** Deliveries after every worker was ready (the rate and CPU are over these). */
  measuredDeliveries: number;
  deliveriesPerS: number;
  workerCpuMsPerDelivery: number;
}

function cpuMs(pid: number): number {
  try {
    const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
    return ((Number(f[11]) + Number(f[12])) * 1000) / 100; // utime + stime, in 100 Hz ticks
  } catch {
    return 0;
  }
}

/** Samples, once a second, how many accepted events the sink has not seen yet. */
function lagSampler(load: Load, sink: Sink, tag: string) {
  const lag: { t: number; lag: number }[] = [];
  let stop = false;
  const loop = (async () => {
    while (!stop) {
      const st = await sink.stats(tag);
      lag.push({ t: load.now(), lag: load.accepted.size - st.unique });
      await sleep(1000);
    }
  })();
  return {
    lag,
    async stop() {
      stop = true;
      await loop;
    },
    /** Seconds after `from` until the lag is back under the worst lag seen before `from` (+ 1 s of load). */
    caughtUpAfter(from: number): number | undefined {
      const before = Math.max(0, ...lag.filter((l) => l.t < from).map((l) => l.lag));
      const after = lag.filter((l) => l.t >= from);
      let worst = 0;
      for (const l of after) {
        worst = Math.max(worst, l.lag);
        if (worst > before + RATE && l.lag <= before + RATE) return l.t - from;
      }
      return worst <= before + RATE ? 0 : undefined;
    },
  };
}

/**
 * Waits (bounded) until the sink saw every accepted id of `load`, then counts. It compares ids, not
 * counts: an event answered 503 may still have been committed (a commit that outlived its timeout)
 * and be delivered too, so the sink can hold more ids than were accepted before it holds them all.
 */
async function settle(load: Load, sink: Sink, tag: string, timeoutMs: number) {
  const deadline = Date.now() + timeoutMs;
  let missing: string[] = [];
  let st = await sink.stats(tag, true);
  for (let i = 0; i < 10_000; i++) {
    const seen = new Set(st.ids ?? []);
    missing = [...load.accepted].filter((id) => !seen.has(id));
    if (missing.length === 0 || Date.now() > deadline) break;
    await sleep(2000);
    st = await sink.stats(tag, true);
  }
  return {
    delivered: load.accepted.size - missing.length,
    lost: missing.length,
    duplicates: st.dupes,
    missing: missing.slice(0, 5),
  };
}

async function createSpillTopic(brokers: string, topic: string): Promise<void> {
  const admin = new Kafka({
    clientId: 'spw-lab',
    brokers: brokers.split(','),
    logLevel: logLevel.NOTHING,
  }).admin();
  await admin.connect();
  try {
    // Right after the cluster forms, a broker may not know the new topic's partitions yet
    // ("does not host this topic-partition"): create without waiting, then poll for leaders.
    await waitFor(
      async () =>
        admin
          .createTopics({
            waitForLeaders: false,
            topics: [
              {
                topic,
                numPartitions: PARTITIONS,
                replicationFactor: 3,
                configEntries: [
                  { name: 'min.insync.replicas', value: '2' },
                  { name: 'max.message.bytes', value: String(8 * 1024 * 1024) },
                ],
              },
            ],
          })
          .then(() => true)
          .catch((e: Error) => (/already exists/i.test(e.message) ? true : false)),
      `spill topic ${topic} created`,
      60_000,
      500,
    );
    await waitFor(
      async () => {
        const md = await admin.fetchTopicMetadata({ topics: [topic] }).catch(() => undefined);
        const parts = md?.topics[0]?.partitions ?? [];
        return parts.length === PARTITIONS && parts.every((p) => p.leader >= 0 && p.isr.length === 3);
      },
      `spill topic ${topic} leaders and full ISR`,
      60_000,
      500,
    );
  } finally {
    await admin.disconnect();
  }
}

/**
 * Committed offset vs log end of each spill partition, for every consumer group of the lab's
 * prefix: tells "still in Kafka, not drained" from "never reached Kafka" when events are missing.
 */
async function spillLag(brokers: string, topic: string, prefix: string): Promise<string> {
  return withKafkaAdmin(brokers, 'spw-lab', async (admin) => {
    const ends = await admin.fetchTopicOffsets(topic);
    const groups = (await admin.listGroups()).groups.map((g) => g.groupId).filter((g) => g.includes(prefix));
    const parts: string[] = [];
    for (const g of groups) {
      const [offs] = await admin.fetchOffsets({ groupId: g, topics: [topic] });
      const lag = (offs?.partitions ?? []).map((p) => {
        const end = Number(ends.find((e) => e.partition === p.partition)?.high ?? 0);
        return `p${p.partition}:${end - Number(p.offset)}`;
      });
      parts.push(`${g} lag ${lag.join(' ')}`);
    }
    return parts.join('; ');
  });
}

export interface WaitCost {
  samples: number;
  bytes: number;
  plainP50Ms: number;
  plainP99Ms: number;
  waitP50Ms: number;
  waitP99Ms: number;
  /** WAIT calls that returned fewer than one replica within the timeout. */
  notReplicated: number;
}

/**
 * What closing Redis's asynchronous-replication window would cost the group commit: one write of a
 * group-commit-sized value (64 events of ~600 B) to the master of the intake slot, alone vs followed
 * by `WAIT 1 100` in the same round trip, alternating, sequentially.
 */
async function waitCost(redis: LabRedisCluster, tag: string, samples = 400): Promise<WaitCost> {
  const node = await redis.masterOf(tag);
  const r = new Redis({ port: node.port, host: '127.0.0.1', lazyConnect: true, maxRetriesPerRequest: 1 });
  await r.connect();
  const key = `${tag}:lab-waitcost`;
  const value = 'x'.repeat(64 * 600);
  const plain: number[] = [];
  const waited: number[] = [];
  let notReplicated = 0;
  try {
    for (let i = 0; i < samples; i++) {
      let t = performance.now();
      await r.set(key, value);
      plain.push(performance.now() - t);
      t = performance.now();
      const res = await r.pipeline().set(key, value).call('WAIT', '1', '100').exec();
      waited.push(performance.now() - t);
      if (Number(res?.[1]?.[1] ?? 0) < 1) notReplicated++;
    }
    await r.del(key);
  } finally {
    r.disconnect();
  }
  const q = (xs: number[], p: number) => {
    const s = [...xs].sort((a, b) => a - b);
    return Number(s[Math.min(s.length - 1, Math.floor(p * s.length))]!.toFixed(3));
  };
  return {
    samples,
    bytes: value.length,
    plainP50Ms: q(plain, 0.5),
    plainP99Ms: q(plain, 0.99),
    waitP50Ms: q(waited, 0.5),
    waitP99Ms: q(waited, 0.99),
    notReplicated,
  };
}

/** The broker leading the most partitions of the spill topic (the one whose loss hurts most). */
async function busiestBroker(brokers: string, topic: string): Promise<number> {
  return withKafkaAdmin(brokers, 'spw-lab', async (admin) => {
    const md = await admin.fetchTopicMetadata({ topics: [topic] });
    const count = new Map<number, number>();
    for (const p of md.topics[0]!.partitions) count.set(p.leader, (count.get(p.leader) ?? 0) + 1);
    return [...count].sort((a, b) => b[1] - a[1])[0]![0];
  });
}

async function main(): Promise<number> {
  const kafka = new LabKafka();
  const redis = new LabRedisCluster(3000);
  let c: SpillwayCluster | undefined;
  let sink: Sink | undefined;
  const rows: FaultRow[] = [];
  const curve: ScalePoint[] = [];
  let waitRow: WaitCost | undefined;
  try {
    log('starting a 3-broker KRaft Kafka and a Redis Cluster (3 masters + 3 replicas)');
    await Promise.all([kafka.start(3), redis.start(3, 1)]);
    log(`kafka ${kafka.bootstrap}; redis ${redis.url}`);
    const snk = await startSink({ trackIds: true });
    sink = snk;
    const ingestPort = await freePort();
    c = new SpillwayCluster('lab', {
      redisUrl: redis.url,
      kafkaBrokers: kafka.bootstrap,
      extra: {
        SPILLWAY_INGEST_PORT: String(ingestPort),
        SPILLWAY_INGEST_BACKEND: 'node',
        SPILLWAY_SPILL_PARTITIONS: String(PARTITIONS),
        SPILLWAY_RETRY_SCHEDULE: '1s,2s,5s,10s,20s',
        // Faster takeover of a dead worker's jobs and partitions than the defaults (docs/operations.md).
        SPILLWAY_JOB_LOCK: '5s',
        SPILLWAY_JOB_STALLED_INTERVAL: '2s',
        SPILLWAY_KAFKA_SESSION_TIMEOUT: '6s',
      },
    });
    const topic = c.env.SPILLWAY_SPILL_TOPIC!;
    await createSpillTopic(kafka.bootstrap, topic);
    await c.tenant('acme', { maxInFlight: 2000, concurrency: 32 });
    // A tenant paused during the broker fault: its deliveries spill to Kafka while a broker is down.
    await c.tenant('parked', { maxInFlight: 2000, concurrency: 32 });
    const gh = await c.githubSource('acme', 'gh');
    const ghParked = await c.githubSource('parked', 'gh-parked');

    const admin = await c.startRole('admin');
    const ingest: RoleProc[] = [await c.startRole('ingest'), await c.startRole('ingest')];
    const workers: RoleProc[] = [];
    for (let i = 0; i < 3; i++) workers.push(await c.startRole('worker'));
    const api = (method: string, path: string) =>
      fetch(`http://127.0.0.1:${admin.adminPort}/v1${path}`, {
        method,
        headers: { authorization: `Bearer ${c!.adminToken}` },
      }).then((r) => r.status);
    log(`spillway: 1 admin, 2 ingest (port ${ingestPort}), 3 workers; load ${RATE} events/s`);

    const wc = await waitCost(redis, createKeys(c.prefix).bullPrefix);
    log(`WAIT cost: ${JSON.stringify(wc)}`);
    waitRow = wc;

    const faults = short
      ? ['kafka-broker', 'redis-failover']
      : ['kafka-broker', 'redis-failover', 'worker', 'ingest'];
    for (const [i, fault] of faults.entries()) {
      const tag = `p${i}-${fault}`;
      await c.endpoint('acme', `ep-${tag}`, sink.url('ok', tag));
      const load = new Load(ingestPort, gh, tag);
      const lag = lagSampler(load, sink, tag);
      let parked: Load | undefined;
      if (fault === 'kafka-broker') {
        await c.endpoint('parked', `ep-${tag}-parked`, sink.url('ok', `${tag}-parked`));
        await api('POST', '/tenants/parked/pause');
        parked = new Load(ingestPort, ghParked, `${tag}-parked`);
        parked.start(Math.round(RATE / 4));
      }
      load.start(RATE);
      await sleep(10_000);
      const at = load.now();
      let note = '';
      if (fault === 'kafka-broker') {
        const id = await busiestBroker(kafka.bootstrap, topic);
        const b = kafka.brokers.find((x) => x.id === id)!;
        log(`${fault}: kill -9 broker ${id} (leads the most spill partitions); restart in 20 s`);
        await kafka.kill9(b);
        await sleep(20_000);
        await kafka.startBroker(b);
        log(
          `${fault}: broker ${id} back after ${(load.now() - at).toFixed(1)} s; resuming the parked tenant`,
        );
        await sleep(5000);
        await api('POST', '/tenants/parked/resume');
        note = `broker ${id} down 20 s; parked tenant's deliveries spilled meanwhile`;
      } else if (fault === 'redis-failover') {
        // Every intake job lives under BullMQ's prefix, one hash tag: one slot, one master.
        const victim = await redis.masterOf(createKeys(c.prefix).bullPrefix);
        const before = await redis.roles();
        const replica = before.find((r) => r.masterPort === victim.port)?.port;
        log(`${fault}: kill -9 the master of the intake slot (port ${victim.port}; replica ${replica})`);
        await victim.proc!.kill9();
        const promoted = await waitFor(
          async () => (await redis.roles()).find((r) => r.port === replica && r.role === 'master'),
          'replica promotion',
          60_000,
          200,
        ).catch(() => undefined);
        const took = load.now() - at;
        log(
          `${fault}: replica ${replica} ${promoted ? `promoted after ${took.toFixed(1)} s` : 'NOT promoted'}`,
        );
        note = `replica promoted after ${took.toFixed(1)} s (node timeout ${redis.nodeTimeoutMs} ms)`;
        await sleep(10_000);
        await redis.startNode(victim); // rejoins as a replica of the promoted node
      } else {
        const pool = fault === 'worker' ? workers : ingest;
        const victim = pool[0]!;
        log(`${fault}: kill -9 ${fault} pid ${victim.proc.pid}; restart in 5 s`);
        await victim.proc.kill9();
        await sleep(5000);
        pool[0] = await c.startRole(victim.role);
        note = `restarted after 5 s`;
      }
      await sleep(20_000);
      await load.stop();
      await parked?.stop();
      log(`${fault}: load stopped (sent ${load.sent}, accepted ${load.accepted.size}); settling`);
      const s = await settle(load, sink, tag, 180_000);
      await lag.stop();
      const p = parked ? await settle(parked, sink, `${tag}-parked`, 180_000) : undefined;
      if (parked && p)
        note += `; parked: accepted ${parked.accepted.size}, delivered ${p.delivered}, lost ${p.lost}`;
      if (s.lost) {
        // What Redis still knows of each missing event: its accepted marker (on the tenant's slot,
        // so it survives a failover of the intake slot; it lives a minute after the accept).
        const keys = createKeys(c.prefix);
        const seen = await Promise.all(
          s.missing.map(async (id) => {
            const marker = await c!.redis
              .get(`${keys.dedupBase('acme')}:p:${fingerprint(id).dedup}`)
              .catch(() => 'error');
            return `${id} (dedup marker=${marker ?? 'none'})`;
          }),
        );
        note += `; missing e.g. ${seen.join(', ')}`;
      }
      if (p?.lost) {
        note += `; parked missing e.g. ${p.missing.join(', ')}`;
        note += `; ${await spillLag(kafka.bootstrap, topic, c.prefix).catch((e) => `lag: ${(e as Error).message}`)}`;
        note += `; parked stats ${JSON.stringify(await (await fetch(`http://127.0.0.1:${admin.adminPort}/v1/tenants/parked/stats`, { headers: { authorization: `Bearer ${c.adminToken}` } })).json())}`;
      }
      rows.push({
        fault,
        accepted: load.accepted.size + (parked?.accepted.size ?? 0),
        delivered: s.delivered + (p?.delivered ?? 0),
        lost: s.lost + (p?.lost ?? 0),
        duplicates: s.duplicates,
        s503: load.s503 + (parked?.s503 ?? 0),
        errors: load.errors + (parked?.errors ?? 0),
        ingestRecoveredS: load.recoveredAfter(at),
        deliveryCaughtUpS: lag.caughtUpAfter(at),
        note,
      });
      log(`${fault}: ${JSON.stringify(rows.at(-1))}`);
      await c.store.deleteEndpoint('acme', `ep-${tag}`);
      if (parked) await c.store.deleteEndpoint('parked', `ep-${tag}-parked`);
    }

    if (!short) {
      // Scaling: events queue up durably with no worker running; then k workers drain them.
      for (const w of workers) await w.proc.stop(30_000);
      workers.length = 0;
      const n = Number(process.env.SPILLWAY_LAB_SCALE_EVENTS ?? 12_000);
      for (const k of [1, 2, 3]) {
        const tag = `scale-${k}`;
        await c.endpoint('acme', `ep-${tag}`, sink.url('ok', tag));
        const load = new Load(ingestPort, gh, tag);
        load.start(1000);
        await waitFor(() => load.sent >= n, 'scale events sent', 120_000, 100);
        await load.stop();
        // Workers start in parallel; the rate and CPU are measured from the moment all are ready
        // (what one drained before the others were up is left out).
        const started = await Promise.all(Array.from({ length: k }, () => c!.startRole('worker')));
        const t0 = performance.timeOrigin + performance.now();
        const d0 = (await sink.stats(tag)).unique;
        const cpu0 = started.reduce((a, w) => a + cpuMs(w.proc.pid), 0);
        await waitFor(
          async () => (await snk.stats(tag)).unique >= load.accepted.size,
          `${tag} drained`,
          300_000,
          200,
        );
        const cpu1 = started.reduce((a, w) => a + cpuMs(w.proc.pid), 0);
        const st = await sink.stats(tag);
        const measured = st.unique - d0;
        const point = {
          workers: k,
          events: load.accepted.size,
          deliveriesPerS: Math.round((measured / Math.max(1, st.last - t0)) * 1000),
          workerCpuMsPerDelivery: Number(((cpu1 - cpu0) / Math.max(1, measured)).toFixed(3)),
          measuredDeliveries: measured,
        };
        curve.push(point);
        log(`scale: ${JSON.stringify(point)}`);
        for (const w of started) await w.proc.stop(30_000);
        await c.store.deleteEndpoint('acme', `ep-${tag}`);
        await sink.reset(tag);
      }
    }
  } finally {
    await c?.close({ keepData: true }).catch(() => {});
    await sink?.close().catch(() => {});
    await Promise.all([kafka.close().catch(() => {}), redis.close().catch(() => {})]);
  }

  const fmt = (v: number | undefined) => (v === undefined ? 'never' : v.toFixed(1));
  const table = [
    '| fault | accepted | delivered | lost | duplicates | 503s | conn errors | ingest recovered (s) | deliveries caught up (s) | note |',
    '| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |',
    ...rows.map(
      (r) =>
        `| ${r.fault} | ${r.accepted} | ${r.delivered} | ${r.lost} | ${r.duplicates} | ${r.s503} | ${r.errors} | ${fmt(r.ingestRecoveredS)} | ${fmt(r.deliveryCaughtUpS)} | ${r.note} |`,
    ),
  ].join('\n');
  process.stdout.write(`\nFault table (load ${RATE} events/s, 2 ingest, 3 workers):\n${table}\n`);
  if (curve.length) {
    const c2 = [
      '| workers | events queued | measured deliveries | deliveries/s | worker CPU ms per delivery |',
      '| --- | --- | --- | --- | --- |',
      ...curve.map(
        (p) =>
          `| ${p.workers} | ${p.events} | ${p.measuredDeliveries} | ${p.deliveriesPerS} | ${p.workerCpuMsPerDelivery} |`,
      ),
    ].join('\n');
    process.stdout.write(`\nScaling curve (sink on loopback answers at once):\n${c2}\n`);
  }
  if (waitRow)
    process.stdout.write(
      `\nGroup commit with WAIT 1 (${waitRow.samples} sequential writes of ${waitRow.bytes} B to the intake slot's master): ` +
        `p50 ${waitRow.plainP50Ms} → ${waitRow.waitP50Ms} ms, p99 ${waitRow.plainP99Ms} → ${waitRow.waitP99Ms} ms; ` +
        `not replicated within 100 ms: ${waitRow.notReplicated}\n`,
    );
  const out = fileURLToPath(new URL('../../.cache/lab/', import.meta.url));
  mkdirSync(out, { recursive: true });
  writeFileSync(
    `${out}result-${short ? 'short' : 'full'}.json`,
    JSON.stringify({ rate: RATE, rows, curve, waitCost: waitRow }, null, 2),
  );
  const lost = rows.reduce((a, r) => a + r.lost, 0);
  process.stdout.write(
    `\nlab: ${lost === 0 ? 'no acknowledged event lost' : `${lost} acknowledged events LOST`}\n`,
  );
  return lost === 0 ? 0 : 1;
}

main().then(
  (code) => process.exit(code),
  (err) => {
    process.stderr.write(`lab: ${(err as Error).stack}\n`);
    process.exit(2);
  },
);

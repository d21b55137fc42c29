/**
 * Storage per event (docs/storage.md): N events at 10 endpoints through a worker with the history
 * on, one tenant's endpoint failing for good so its DLQ overflows its cap; then Redis bytes per
 * event by what they are for (INFO memory, and MEMORY USAGE of every key), Kafka disk bytes per
 * event (the history topics' log directories), and the Redis steady state extrapolated to
 * 1,000 events/s with a 24 h dedup window and 7 days of history.
 */
import { readdirSync, statSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { createKeys } from '@spillway/shared';
import kafkajs, { Kafka, logLevel } from 'kafkajs';
import { PrivateRedis } from '../../helpers/redis-server.ts';
import { sleep, waitFor } from '../../helpers/wait.ts';
import type { Goal, Row } from '../lib/report.ts';
import { startSink } from '../lib/sink.ts';
import { deleteTopic, openIntake, SpillwayCluster } from '../lib/spillway.ts';
import type { Benchmark } from './types.ts';

const { ConfigResourceTypes } = kafkajs;

const ENDPOINTS = 10;
const TENANTS = 20;
/** The target (docs/storage.md). */
const RATE = 1000;
const DEDUP_EVENTS = RATE * 86_400;
const LOG_EVENTS = RATE * 7 * 86_400;
const TARGET_TENANTS = 200;
const TENANT_MINUTES = 7 * 1440;
const GB = 1e9;

/** What a key is for, from its name. */
function category(key: string): string {
  if (/:dd:p:/.test(key)) return 'accepted markers';
  if (/:dd:/.test(key)) return 'dedup fingerprints';
  if (/:ix:/.test(key)) return 'event-id index';
  if (/:(el|al):/.test(key)) return 'minute indexes';
  if (/:(fa|la):|:fe$/.test(key)) return 'failed/later attempt sets';
  if (/:dlq(:|$)/.test(key)) return 'DLQ';
  if (/^\{/.test(key)) return 'BullMQ queues';
  return 'config, counters, stats';
}

/** Bytes of a partition directory's record data (`.log` segments; index files are preallocated). */
function du(dir: string): number {
  let n = 0;
  for (const f of readdirSync(dir)) if (f.endsWith('.log')) n += statSync(join(dir, f)).size;
  return n;
}

export const storage: Benchmark = {
  name: 'storage',
  title: 'Storage per event (Redis and Kafka disk)',
  method:
    "1,000,000 events (`--quick` 20,000; `SPILLWAY_BENCH_STORAGE_EVENTS` sets it) of 256 B to 20 tenants with 10 endpoints each, through the in-process intake and one worker (`spillway start --role worker`) on a private redis-server, history on; a 21st tenant gets every 21st event (5 % more) whose 10th endpoint answers 404 (retry schedule 50ms, DLQ cap a quarter of its failures, at most 2,000), so its DLQ overflows into the Kafka archive during the run; its length is sampled every 250 ms. After every failing delivery is dead-lettered (in the list or the archive): Redis `INFO memory` used_memory against the empty baseline, and `MEMORY USAGE` of every key grouped by what it is for; Kafka bytes = the history topics' partition directories under the broker's `log.dirs` (the `.log` segments). The extrapolation multiplies each group's bytes per event by what the target keeps (24 h of ids for dedup, 7 days for the event-id index), the minute indexes by 200 tenants × 7 days of minutes, and adds the capped sets and one DLQ at their caps.",
  targets: [
    'Redis steady state at 1,000 events/s, 10 endpoints, 24 h dedup, 7 days of history ≤ 4 GB (extrapolated).',
    'The DLQ stays at its cap while it overflows (the rest is in the Kafka archive).',
  ],
  async run({ quick, log }) {
    const N = Number(process.env.SPILLWAY_BENCH_STORAGE_EVENTS ?? (quick ? 20_000 : 1_000_000));
    const failingN = Math.round(N * 0.05);
    // Well below what the failing endpoint dead-letters, so the DLQ overflows during the run.
    const dlqCap = Math.max(50, Math.min(2000, Math.floor(failingN / 4)));
    const notes: string[] = [];
    const own = new PrivateRedis(0, { aof: 'off' });
    await own.start();
    const sink = await startSink();
    const nope = createServer((req, res) => {
      req.resume();
      req.on('end', () => res.writeHead(404).end('no hook here'));
    });
    await new Promise<void>((r) => nope.listen(0, '127.0.0.1', r));
    const c = new SpillwayCluster('st', {
      redisUrl: own.url,
      extra: {
        SPILLWAY_HISTORY_PARTITIONS: '4',
        SPILLWAY_DLQ_CAP: String(dlqCap),
        SPILLWAY_RETRY_SCHEDULE: '50ms',
        SPILLWAY_ENDPOINT_DISABLE_AFTER: 'off',
        SPILLWAY_TENANT_EVENTS_PER_DAY: 'off',
      },
    });
    c.env.SPILLWAY_HISTORY_TOPIC = `${c.prefix}.history`;
    let feeder: Awaited<ReturnType<typeof openIntake>> | undefined;
    // One admin client for the run: the archive's offsets (polled) and the broker's log.dirs.
    const admin = new Kafka({
      brokers: c.env.SPILLWAY_KAFKA_BROKERS!.split(','),
      logLevel: logLevel.NOTHING,
    }).admin();
    try {
      const base = Number(/used_memory:(\d+)/.exec(await c.redis.info('memory'))?.[1]);
      for (let t = 0; t < TENANTS; t++) {
        await c.tenant(`t${t}`, { maxInFlight: 5000, concurrency: 64 });
        for (let e = 0; e < ENDPOINTS; e++) await c.endpoint(`t${t}`, `e${e}`, sink.url('ok', 'st'));
      }
      await c.tenant('dlq', { maxInFlight: 5000, concurrency: 64 });
      for (let e = 0; e < ENDPOINTS - 1; e++) await c.endpoint('dlq', `e${e}`, sink.url('ok', 'st'));
      await c.endpoint('dlq', 'down', `http://127.0.0.1:${(nope.address() as AddressInfo).port}/hook`);
      const w = await c.startRole('worker');
      feeder = await openIntake(c);
      // The DLQ's length while it overflows, sampled through the run (the cap is hard: a write that
      // finds the list full waits for the archive), and how many went to the Kafka archive.
      const dlqKey = createKeys(c.prefix).dlq('dlq');
      const archiveTopic = `${c.env.SPILLWAY_HISTORY_TOPIC}.dlq`;
      let dlqMax = 0;
      const sampler = setInterval(() => {
        void c.redis.llen(dlqKey).then(
          (n) => {
            dlqMax = Math.max(dlqMax, n);
          },
          () => {},
        );
      }, 250);
      await admin.connect();
      const archived = async () => {
        try {
          const offs = await admin.fetchTopicOffsets(archiveTopic);
          return offs.reduce((a, o) => a + Number(o.high) - Number(o.low), 0);
        } catch {
          return 0; // not created yet
        }
      };
      const t0 = performance.now();
      // Every 21st event goes to the overflowing tenant, so its DLQ overflows during the run.
      const tenantOf = (i: number) => (i % 21 === 20 ? 'dlq' : `t${i % TENANTS}`);
      for (let i = 0; i < N + failingN; i += 1000) {
        await Promise.all(
          Array.from({ length: Math.min(1000, N + failingN - i) }, (_, k) =>
            feeder!.submit(tenantOf(i + k), 256, 'order.created'),
          ),
        );
        if (i % 100_000 === 0) log(`accepted ${i}; DLQ ${await c.redis.llen(dlqKey)} (max ${dlqMax})`);
      }
      // The i < N + failingN with i % 21 === 20.
      const failing = Math.floor((N + failingN + 1) / 21);
      const want = (N + failingN) * ENDPOINTS - failing;
      await waitFor(
        async () => (await sink.stats('st')).count >= want,
        `${want} deliveries`,
        // ≥ ~2,600 deliveries/s: a worker writing history for every attempt on this 2-core machine
        // did about 4,000/s beside the sink and Redis (2.8 M of 10.45 M in 12 min), so N / 500 s timed out.
        Math.max(120_000, (N / 250) * 1000),
        1000,
      );
      // Every failing delivery dead-lettered: in the list or in the archive (an entry is briefly in
      // both while its archive round runs, so ≥).
      let settled = 0;
      let lastLog = 0;
      await waitFor(
        async () => {
          const len = await c.redis.llen(dlqKey);
          settled = len + (await archived());
          if (Date.now() - lastLog > 30_000) {
            lastLog = Date.now();
            log(`dead letters: ${len} in Redis + ${settled - len} archived of ${failing}`);
          }
          return settled >= failing;
        },
        `${failing} dead letters (list + archive)`,
        600_000,
        1000,
      );
      clearInterval(sampler);
      const seconds = (performance.now() - t0) / 1000;
      await sleep(2000); // the history writer's last flush
      log(`${N + failingN} events, ${want} deliveries in ${seconds.toFixed(0)} s`);

      // Redis: INFO memory and every key's MEMORY USAGE, by what it is for.
      const used = Number(/used_memory:(\d+)/.exec(await c.redis.info('memory'))?.[1]) - base;
      const groups = new Map<string, { keys: number; bytes: number }>();
      let tenantMinutes = 0;
      let setMembers = 0;
      for (const pattern of [`${c.prefix}:*`, `{${c.prefix}}:*`]) {
        let cursor = '0';
        do {
          const [next, batch] = (await c.redis.scan(cursor, 'MATCH', pattern, 'COUNT', 1000)) as [
            string,
            string[],
          ];
          cursor = next;
          if (batch.length === 0) continue;
          const pipe = c.redis.pipeline();
          for (const k of batch) pipe.memory('USAGE', k, 'SAMPLES', '0');
          const res = (await pipe.exec()) ?? [];
          batch.forEach((k, i) => {
            const g = groups.get(category(k)) ?? { keys: 0, bytes: 0 };
            g.keys++;
            g.bytes += Number(res[i]?.[1] ?? 0);
            groups.set(category(k), g);
          });
          for (const k of batch.filter((x) => /:(el|al):\d+$/.test(x)))
            tenantMinutes += await c.redis.hlen(k);
          for (const k of batch.filter((x) => /:(fa|la):|:fe$/.test(x))) setMembers += await c.redis.zcard(k);
        } while (cursor !== '0');
      }
      const dlqLen = await c.redis.llen(dlqKey);
      const dlqArchived = await archived();

      // Kafka: the history topics' partition directories.
      const kafkaBytes: Record<string, number> = { events: 0, attempts: 0, dlq: 0 };
      try {
        const { brokers } = await admin.describeCluster();
        const cfg = await admin.describeConfigs({
          includeSynonyms: false,
          resources: [
            {
              type: ConfigResourceTypes.BROKER,
              name: String(brokers[0]!.nodeId),
              configNames: ['log.dirs', 'log.dir'],
            },
          ],
        });
        const entry = (n: string) =>
          cfg.resources[0]!.configEntries.find((e) => e.configName === n)?.configValue;
        // log.dirs wins over log.dir when set (Kafka's rule).
        const dirs = (entry('log.dirs') || entry('log.dir') || '').split(',').filter(Boolean);
        for (const dir of dirs)
          for (const d of readdirSync(dir))
            for (const kind of Object.keys(kafkaBytes))
              if (d.startsWith(`${c.env.SPILLWAY_HISTORY_TOPIC}.${kind}-`))
                kafkaBytes[kind]! += du(join(dir, d));
      } catch (err) {
        notes.push(
          `Kafka disk not measured (the broker's log.dirs are not readable here): ${(err as Error).message}`,
        );
      }
      const events = N + failingN;

      const rows: Row[] = [];
      const g = (name: string) => groups.get(name) ?? { keys: 0, bytes: 0 };
      const steady = new Map<string, number>();
      steady.set('dedup fingerprints', (g('dedup fingerprints').bytes / events) * DEDUP_EVENTS);
      // Markers live a minute: what 60 s of the target rate leaves, at the measured bytes per marker.
      const marker = g('accepted markers').keys
        ? g('accepted markers').bytes / g('accepted markers').keys
        : 0;
      steady.set('accepted markers', marker * RATE * 60);
      steady.set('event-id index', (g('event-id index').bytes / events) * LOG_EVENTS);
      steady.set(
        'minute indexes',
        tenantMinutes ? (g('minute indexes').bytes / tenantMinutes) * TARGET_TENANTS * TENANT_MINUTES * 2 : 0,
      );
      // One failing endpoint's sets at the retention cap (100,000 members each).
      steady.set(
        'failed/later attempt sets',
        setMembers ? (g('failed/later attempt sets').bytes / setMembers) * 100_000 * 2 : 0,
      );
      // One overflowing DLQ at the default cap (10,000).
      steady.set('DLQ', dlqLen ? (g('DLQ').bytes / dlqLen) * 10_000 : 0);
      steady.set('BullMQ queues', g('BullMQ queues').bytes);
      steady.set('config, counters, stats', g('config, counters, stats').bytes);
      for (const name of [
        'dedup fingerprints',
        'accepted markers',
        'event-id index',
        'minute indexes',
        'failed/later attempt sets',
        'DLQ',
        'BullMQ queues',
        'config, counters, stats',
      ])
        rows.push({
          label: name,
          values: {
            keys: g(name).keys,
            bytes: g(name).bytes,
            perEvent: g(name).bytes / events,
            steadyGB: (steady.get(name) ?? 0) / GB,
          },
        });
      const total = [...steady.values()].reduce((a, b) => a + b, 0);
      rows.push({
        label: 'Redis INFO used_memory (all of it)',
        values: { bytes: used, perEvent: used / events },
      });
      rows.push({
        label: 'Redis steady state at 1,000 events/s (extrapolated)',
        values: { steadyGB: total / GB },
      });
      for (const [kind, bytes] of Object.entries(kafkaBytes))
        rows.push({
          label: `Kafka disk: ${c.env.SPILLWAY_HISTORY_TOPIC}.${kind}`,
          values: { bytes, perEvent: bytes / events },
        });
      log(
        `Redis ${used} B (${(used / events).toFixed(1)} B/event); steady state ${(total / GB).toFixed(2)} GB; DLQ ${dlqLen}`,
      );
      notes.push(
        `${events} events (${failingN} to the overflowing tenant), ${want} deliveries in ${seconds.toFixed(0)} s; the DLQ held at most ${dlqMax} entries while it overflowed and ${dlqLen} at the end (cap ${dlqCap}), ${dlqArchived} went to the Kafka archive; ${tenantMinutes} tenant-minutes and ${setMembers} attempt-set members indexed.`,
        'The per-event Redis cost of a short run is higher than at steady state for the minute indexes and markers (fixed per minute and per minute of traffic); the extrapolation uses per-minute and per-marker costs for those.',
      );
      const goals: Goal[] = [
        {
          what: 'Redis steady state at 1,000 events/s (extrapolated)',
          target: '≤ 4 GB',
          measured: total / GB,
          shown: `${(total / GB).toFixed(2)} GB`,
          pass: total <= 4 * GB,
        },
        {
          what: 'DLQ entries in Redis while it overflows',
          target: `≤ cap (${dlqCap})`,
          measured: dlqMax,
          shown: `max ${dlqMax} sampled, ${dlqArchived} archived`,
          pass: dlqMax <= dlqCap && dlqArchived > 0,
        },
      ];
      void w;
      return {
        status: 'ok',
        columns: [
          { key: 'keys', header: 'keys' },
          { key: 'bytes', header: 'bytes' },
          { key: 'perEvent', header: 'bytes/event', digits: 2 },
          { key: 'steadyGB', header: 'GB at 1,000/s', digits: 3 },
        ],
        rows,
        goals,
        notes,
      };
    } finally {
      await feeder?.close().catch(() => {});
      await admin.disconnect().catch(() => {});
      await c.close();
      for (const kind of ['events', 'attempts', 'dlq'])
        await deleteTopic(c.env.SPILLWAY_KAFKA_BROKERS!, `${c.env.SPILLWAY_HISTORY_TOPIC}.${kind}`).catch(
          () => {},
        );
      await sink.close();
      await new Promise((r) => nope.close(r));
      await own.destroy();
    }
  },
};

/**
 * Fan-out delivery: deliveries per second from the durable intake to a local sink through one
 * Spillway worker process, with 1 and 10 subscribed endpoints per event, against a raw undici Pool
 * driving the same sink in the same run.
 */
import { Pool } from 'undici';
import { until } from '../lib/procs.ts';
import type { Goal, Row } from '../lib/report.ts';
import { startSink } from '../lib/sink.ts';
import { eventBody, openIntake, redisCommands, SpillwayCluster } from '../lib/spillway.ts';
import type { Benchmark } from './types.ts';

const CONNECTIONS = 16;
const IN_FLIGHT = 64;

export const fanout: Benchmark = {
  name: 'fanout',
  title: 'Fan-out delivery',
  method: `Peer: a raw undici Pool (${CONNECTIONS} connections, ${IN_FLIGHT} requests in flight) POSTing the same 256-byte body to the sink. Spillway: one \`spillway start --role worker\` process; a preload of events is enqueued through the router's durable intake (group-committed BullMQ batches in Redis, 256-byte bodies), then the worker is started and drains it: intake job → fan-out → credit queue → signed undici delivery. The tenant's credits cover the whole preload so nothing spills (the spill path is the backlog benchmark). Rate = deliveries ÷ time between the first and the last arrival at the sink; the column "incl. worker start" counts from process start. Tenant concurrency 64 (${CONNECTIONS} connections per origin, the delivery default). The sink is a node:http process answering 200. Full: 30 000 deliveries per case; \`--quick\`: 6 000.`,
  targets: [
    'Spillway deliveries/s ≥ 50 % of raw undici to the same sink (a naive BullMQ job per delivery measured 17 %).',
  ],
  async run({ quick, log }) {
    const durationMs = quick ? 5000 : 15_000;
    const warmMs = quick ? 1500 : 3000;
    const rows: Row[] = [];
    const notes: string[] = [];
    const sink = await startSink();
    try {
      // Peer: raw undici, closed loop with IN_FLIGHT requests outstanding.
      {
        const pool = new Pool(`http://127.0.0.1:${sink.port}`, { connections: CONNECTIONS });
        const body = eventBody(256);
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
        log(`raw undici: ${rate.toFixed(0)} req/s`);
        rows.push({ label: 'raw undici Pool', values: { events: rate, deliveries: rate, status: 'ok' } });
      }

      for (const perEvent of [1, 10]) {
        const label = `Spillway, ${perEvent} endpoint${perEvent > 1 ? 's' : ''}/event`;
        const c = new SpillwayCluster('bf');
        const tag = `f${perEvent}`;
        let feeder: Awaited<ReturnType<typeof openIntake>> | undefined;
        try {
          const events = (quick ? 6000 : 30_000) / perEvent;
          const expected = events * perEvent;
          // Credits cover the whole preload so nothing spills: this measures the hot path.
          await c.tenant('acme', { maxInFlight: expected + 1000, concurrency: 64 });
          for (let e = 0; e < perEvent; e++)
            await c.endpoint('acme', `ep${e}`, `${sink.url('ok', tag)}/e${e}`);
          feeder = await openIntake(c);
          const f = feeder;
          const t0 = performance.now();
          for (let i = 0; i < events; i += 500) {
            const jobs: Promise<unknown>[] = [];
            for (let j = i; j < Math.min(events, i + 500); j++) jobs.push(f.submit('acme'));
            await Promise.all(jobs);
          }
          const enqueueS = (performance.now() - t0) / 1000;
          const cmds0 = await redisCommands(c);
          await c.startRole('worker');
          const started = performance.timeOrigin + performance.now();
          try {
            await until(async () => (await sink.stats(tag)).count > 0, 'first delivery', 30_000);
          } catch {
            rows.push({ label, values: { status: 'no delivery' } });
            notes.push(`${label}: the worker delivered nothing within 30 s; not measured.`);
            continue;
          }
          await until(
            async () => (await sink.stats(tag)).count >= expected,
            'the preload to drain',
            quick ? 60_000 : 180_000,
          ).catch(() => {});
          const st = await sink.stats(tag);
          // Every Redis command the worker sent from its start to the last delivery (job claims,
          // locks, records, counters, limiter, stats), per delivery.
          const perDelivery = ((await redisCommands(c)) - cmds0) / Math.max(1, st.count);
          const rate = (st.count * 1000) / Math.max(1, st.last - st.first);
          const sinceStart = (st.count * 1000) / Math.max(1, st.last - started);
          log(
            `${label}: ${rate.toFixed(0)} deliveries/s (${sinceStart.toFixed(0)}/s from worker start); ${st.count}/${expected}; enqueue took ${enqueueS.toFixed(1)} s`,
          );
          rows.push({
            label,
            values: {
              events: rate / perEvent,
              deliveries: rate,
              fromStart: sinceStart,
              delivered: `${st.count}/${expected}`,
              redisPerDelivery: perDelivery,
              status: st.count >= expected ? 'ok' : 'incomplete',
            },
          });
        } catch (err) {
          rows.push({ label, values: { status: 'failed' } });
          notes.push(`${label}: ${(err as Error).message.split('\n')[0]}`);
        } finally {
          await feeder?.close().catch(() => {});
          await c.close();
        }
      }
    } finally {
      await sink.close();
    }
    const raw = rows[0]?.values.deliveries as number | undefined;
    for (const r of rows)
      r.values.vsRaw = raw && typeof r.values.deliveries === 'number' ? r.values.deliveries / raw : undefined;
    const one = rows.find((r) => r.label.includes(', 1 endpoint'))?.values.vsRaw as number | undefined;
    const ten = rows.find((r) => r.label.includes('10 endpoints'))?.values.vsRaw as number | undefined;
    const goals: Goal[] = [
      {
        what: 'Spillway 1 endpoint/event ÷ raw undici deliveries/s',
        target: '≥ 0.50',
        measured: one,
        pass: one === undefined ? undefined : one >= 0.5,
      },
      {
        what: 'Spillway 10 endpoints/event ÷ raw undici deliveries/s',
        target: '≥ 0.50',
        measured: ten,
        pass: ten === undefined ? undefined : ten >= 0.5,
      },
    ];
    return {
      status: one !== undefined && ten !== undefined ? 'ok' : 'partial',
      columns: [
        { key: 'events', header: 'events/s' },
        { key: 'deliveries', header: 'deliveries/s' },
        { key: 'vsRaw', header: '÷ raw undici', digits: 2 },
        { key: 'fromStart', header: 'incl. worker start /s' },
        { key: 'redisPerDelivery', header: 'Redis calls/delivery', digits: 3 },
        { key: 'delivered', header: 'delivered' },
        { key: 'status', header: 'status' },
      ],
      rows,
      goals,
      notes,
      chart: { key: 'deliveries', unit: 'deliveries/s (higher is better)' },
    };
  },
};

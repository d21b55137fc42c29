/**
 * The Kafka broker stopped and started again while a paused tenant's tasks are spilled to it and
 * more keep arriving: no process may need a restart, and after resume every accepted event must be
 * delivered. Uses a broker of its own (separate state dir and ports), never the shared one.
 */
import { rssSampler } from '../../bench/lib/procs.ts';
import { startSink } from '../../bench/lib/sink.ts';
import { describeDeath, SpillwayCluster, tenantCounters } from '../../bench/lib/spillway.ts';
import { PrivateKafka } from '../../helpers/kafka-broker.ts';
import { sleep } from '../../helpers/wait.ts';
import { LoadGen } from '../lib/load.ts';
import { type Outcome, settle, toMiB } from '../lib/outcome.ts';
import type { ScenarioOptions } from './types.ts';

export async function kafka({ short, log }: ScenarioOptions): Promise<Outcome> {
  const rate = short ? 100 : 200;
  const t0 = Date.now();
  const own = new PrivateKafka();
  log('starting a Kafka broker of our own');
  await own.start();
  const sink = await startSink({ trackIds: true });
  const c = new SpillwayCluster('ckf', {
    kafkaBrokers: own.brokers,
    extra: { SPILLWAY_RETRY_SCHEDULE: '1s,2s,5s,10s,20s' },
  });
  const failures: string[] = [];
  let load: LoadGen | undefined;
  const rss = rssSampler(() => c.roles.map((r) => r.proc.pid));
  try {
    await c.tenant('acme', { maxInFlight: 2000, concurrency: 32 });
    await c.endpoint('acme', 'ep', sink.url('ok', 'kf'));
    const src = await c.githubSource('acme', 'gh');
    const ingest = await c.startRole('ingest');
    await c.startRole('worker');
    // Paused: everything the worker receives for acme goes to the spill topic.
    await c.store.updateTenant('acme', (t) => ({ ...t, status: 'paused' }));
    await sleep(1500);
    const l = new LoadGen(() => ingest.ingestPort!, src);
    load = l;
    l.start(rate);
    await sleep(short ? 5000 : 10_000);
    const spilledBefore = (await tenantCounters(c, 'acme')).spilled;
    log(`stopping Kafka: accepted ${l.accepted.size}, spilled ${spilledBefore}`);
    await own.stop();
    const downAt = Date.now();
    await sleep(10_000);
    log(`starting Kafka again (accepted ${l.accepted.size}, 503s ${l.count('503')})`);
    await own.start();
    const downS = Math.round((Date.now() - downAt) / 1000);
    log(`Kafka back after ${downS} s`);
    await sleep(short ? 5000 : 10_000);
    await l.stop();
    const spilledAfter = (await tenantCounters(c, 'acme')).spilled;
    log(
      `load stopped: sent ${l.sent}, accepted ${l.accepted.size}, spilled ${spilledAfter}; resuming the tenant`,
    );
    await c.store.updateTenant('acme', (t) => ({ ...t, status: 'active' }));
    const s = await settle(l, sink, 'kf', short ? 120_000 : 180_000, c);
    for (const r of c.roles) if (r.proc.child.exitCode !== null) failures.push(describeDeath(r));
    if (spilledBefore === 0)
      failures.push('nothing was spilled before Kafka stopped (the scenario did not test the spill)');
    if (s.lost > 0)
      failures.push(
        `${s.lost} accepted events neither delivered nor dead-lettered (e.g. ${s.missing.join(', ')}; worker counters ${s.state})`,
      );
    return {
      scenario: 'kafka-restart',
      sent: l.sent,
      accepted: l.accepted.size,
      delivered: s.delivered,
      duplicates: s.duplicates,
      lost: s.lost,
      s503: l.count('503'),
      maxRssMiB: toMiB(rss.max()),
      extra: {
        dead_lettered: s.deadLettered,
        spilled_before_stop: spilledBefore,
        spilled_total: spilledAfter,
        down_s: downS,
        other:
          [...l.statuses]
            .filter(([k]) => !['202', '503'].includes(k))
            .map(([k, v]) => `${k}:${v}`)
            .join(',') || 'none',
      },
      failures,
      seconds: (Date.now() - t0) / 1000,
    };
  } finally {
    rss.stop();
    await load?.stop().catch(() => {});
    await load?.close().catch(() => {});
    await c.close({ keepData: false }).catch(() => {});
    await sink.close();
    await own.destroy();
  }
}

/**
 * The Kafka broker stopped and started again while a paused tenant's tasks are spilled to it and
 * more keep arriving: no process may need a restart, and after resume every accepted event must be
 * delivered. Uses a broker of its own (separate state dir and ports), never the shared one.
 */
import { tenantCounters } from '../../bench/lib/spillway.ts';
import { PrivateKafka } from '../../helpers/kafka-broker.ts';
import { sleep } from '../../helpers/wait.ts';
import { LoadGen } from '../lib/load.ts';
import { acme, chaosWorld, type Outcome, otherStatuses, outcome, settle, tearDown } from '../lib/outcome.ts';
import type { ScenarioOptions } from './types.ts';

export async function kafka({ short, log }: ScenarioOptions): Promise<Outcome> {
  const rate = short ? 100 : 200;
  const t0 = Date.now();
  const own = new PrivateKafka();
  log('starting a Kafka broker of our own');
  await own.start();
  const { sink, c, rss, failures } = await chaosWorld('ckf', { kafkaBrokers: own.brokers });
  let load: LoadGen | undefined;
  try {
    const src = await acme(c, sink, 'kf');
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
    if (spilledBefore === 0)
      failures.push('nothing was spilled before Kafka stopped (the scenario did not test the spill)');
    return outcome({
      scenario: 'kafka-restart',
      load: l,
      settled: s,
      roles: c.roles,
      maxRss: rss.max(),
      extra: {
        spilled_before_stop: spilledBefore,
        spilled_total: spilledAfter,
        down_s: downS,
        other: otherStatuses(l),
      },
      failures,
      t0,
    });
  } finally {
    await tearDown({ rss, load, c, sink });
    await own.destroy();
  }
}

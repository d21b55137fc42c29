/**
 * Redis stopped for 10 s under load, then started again on the same AOF: ingest must answer 503
 * (never 2xx) meanwhile, every process must recover on its own, and nothing accepted may be lost.
 */
import { PrivateRedis } from '../../helpers/redis-server.ts';
import { sleep } from '../../helpers/wait.ts';
import { LoadGen } from '../lib/load.ts';
import { acme, chaosWorld, type Outcome, otherStatuses, outcome, settle, tearDown } from '../lib/outcome.ts';
import type { ScenarioOptions } from './types.ts';

export async function redis({ short, log }: ScenarioOptions): Promise<Outcome> {
  const rate = short ? 100 : 200;
  const t0 = Date.now();
  const own = new PrivateRedis();
  await own.start();
  const { sink, c, rss, failures } = await chaosWorld('cr', { redisUrl: own.url });
  let load: LoadGen | undefined;
  try {
    const src = await acme(c, sink, 'rd');
    const ingest = await c.startRole('ingest');
    await c.startRole('worker');
    await c.startRole('admin');
    const l = new LoadGen(() => ingest.ingestPort!, src);
    load = l;
    l.start(rate);
    await sleep(short ? 4000 : 8000);
    const before = { accepted: l.accepted.size, s503: l.count('503') };
    log(`stopping Redis (accepted so far ${before.accepted})`);
    await own.stop();
    const downAt = Date.now();
    await sleep(10_000);
    const during = { accepted: l.accepted.size, s503: l.count('503') };
    const readyDuring = await fetch(`http://127.0.0.1:${ingest.adminPort}/readyz`).then(
      (r) => r.status,
      () => 0,
    );
    await own.start();
    log(
      `Redis back after ${((Date.now() - downAt) / 1000).toFixed(1)} s; 503s while down ${during.s503 - before.s503}, accepted while down ${during.accepted - before.accepted}, /readyz was ${readyDuring}`,
    );
    await sleep(short ? 8000 : 15_000);
    const after = l.accepted.size;
    await l.stop();
    const readyAfter = await fetch(`http://127.0.0.1:${ingest.adminPort}/readyz`).then(
      (r) => r.status,
      () => 0,
    );
    log(
      `load stopped: sent ${l.sent}, accepted ${l.accepted.size} (${after - during.accepted} after the restart); waiting for delivery`,
    );
    const s = await settle(l, sink, 'rd', short ? 90_000 : 150_000, c);
    if (during.s503 - before.s503 === 0) failures.push('no 503 while Redis was down');
    if (after - during.accepted === 0) failures.push('ingest accepted nothing after Redis came back');
    if (readyAfter !== 200) failures.push(`/readyz answered ${readyAfter} after Redis came back`);
    return outcome({
      scenario: 'redis-restart',
      load: l,
      settled: s,
      roles: c.roles,
      maxRss: rss.max(),
      extra: {
        down_s: 10,
        accepted_while_down: during.accepted - before.accepted,
        readyz_while_down: readyDuring,
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

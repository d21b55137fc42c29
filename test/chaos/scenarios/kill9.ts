/**
 * kill -9 of a random Spillway process (two ingest, two workers, one admin, each its own process)
 * at random moments while load runs; the killed one is started again as a supervisor would.
 * Every event answered 2xx must reach the sink: at-least-once, duplicates counted.
 */
import { rssSampler } from '../../bench/lib/procs.ts';
import { startSink } from '../../bench/lib/sink.ts';
import { type RoleName, type RoleProc, SpillwayCluster } from '../../bench/lib/spillway.ts';
import { freePort } from '../../helpers/ports.ts';
import { sleep } from '../../helpers/wait.ts';
import { LoadGen } from '../lib/load.ts';
import { acme, type Outcome, outcome, settle, tearDown } from '../lib/outcome.ts';
import type { ScenarioOptions } from './types.ts';

export async function kill9({ short, log, seed }: ScenarioOptions): Promise<Outcome> {
  const rounds = short ? 6 : 20;
  const rate = short ? 100 : 200;
  let rnd = seed;
  // Seeded so that a failing run can be replayed with the printed seed.
  const random = () => {
    rnd = (rnd * 1103515245 + 12345) & 0x7fffffff;
    return rnd / 0x7fffffff;
  };
  const t0 = Date.now();
  const sink = await startSink({ trackIds: true });
  const ingestPort = await freePort();
  const c = new SpillwayCluster('ck', {
    extra: { SPILLWAY_INGEST_PORT: String(ingestPort), SPILLWAY_RETRY_SCHEDULE: '1s,2s,5s,10s,20s' },
  });
  const load = new LoadGen(() => ingestPort, await acme(c, sink, 'k9'));
  const live: RoleProc[] = [];
  const rss = rssSampler(() => live.map((r) => r.proc.pid));
  const failures: string[] = [];
  const kills: Record<string, number> = { ingest: 0, worker: 0, admin: 0 };
  try {
    for (const role of ['ingest', 'ingest', 'worker', 'worker', 'admin'] as RoleName[])
      live.push(await c.startRole(role));
    load.start(rate);
    await sleep(2000);
    for (let round = 1; round <= rounds; round++) {
      await sleep(500 + random() * (short ? 1500 : 2500));
      const i = Math.floor(random() * live.length);
      const victim = live[i]!;
      await victim.proc.kill9();
      kills[victim.role] = (kills[victim.role] ?? 0) + 1;
      log(
        `round ${round}: kill -9 ${victim.role} pid ${victim.proc.pid}; accepted so far ${load.accepted.size}`,
      );
      await sleep(200 + random() * 1000);
      try {
        live[i] = await c.startRole(victim.role);
      } catch (err) {
        failures.push(`restarting ${victim.role} failed: ${(err as Error).message.split('\n')[0]}`);
        live.splice(i, 1);
      }
    }
    await sleep(2000);
    await load.stop();
    log(`load stopped: sent ${load.sent}, accepted ${load.accepted.size}; waiting for delivery`);
    const s = await settle(load, sink, 'k9', short ? 90_000 : 150_000, c);
    return outcome({
      scenario: 'kill-9',
      load,
      settled: s,
      roles: live,
      maxRss: rss.max(),
      extra: {
        rounds,
        seed,
        kills: `ingest:${kills.ingest},worker:${kills.worker},admin:${kills.admin}`,
        conn_errors: [...load.statuses].filter(([k]) => k.startsWith('error')).reduce((a, [, v]) => a + v, 0),
      },
      failures,
      t0,
    });
  } finally {
    await tearDown({ rss, load, c, sink });
  }
}

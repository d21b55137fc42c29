import { createKeys } from '@spillway/shared';
import { rssSampler } from '../../bench/lib/procs.ts';
import { type Sink, startSink } from '../../bench/lib/sink.ts';
import {
  describeDeath,
  type RoleProc,
  SpillwayCluster,
  type SpillwayEnvOptions,
  tenantCounters,
} from '../../bench/lib/spillway.ts';
import { MiB } from '../../bench/lib/stats.ts';
import { waitFor } from '../../helpers/wait.ts';
import type { LoadGen } from './load.ts';

/** What every chaos scenario reports, as one line. */
export interface Outcome {
  scenario: string;
  sent: number;
  accepted: number;
  delivered: number;
  duplicates: number;
  lost: number;
  s503: number;
  maxRssMiB: number;
  /** Scenario-specific figures (p99s, rounds, kills…). */
  extra: Record<string, string | number>;
  /** Broken expectations other than loss (a process that died, no 503 during an outage…). */
  failures: string[];
  seconds: number;
}

export function line(o: Outcome): string {
  const extra = Object.entries(o.extra)
    .map(([k, v]) => `${k}=${v}`)
    .join(' ');
  return `chaos ${o.scenario}: sent=${o.sent} accepted=${o.accepted} delivered=${o.delivered} duplicates=${o.duplicates} lost=${o.lost} 503s=${o.s503} maxRSS=${o.maxRssMiB.toFixed(0)}MiB${extra ? ` ${extra}` : ''} (${o.seconds.toFixed(0)} s)${o.failures.length ? ` FAILED: ${o.failures.join('; ')}` : ''}`;
}

/**
 * Waits (bounded) until the sink has seen every accepted id, then counts delivered, duplicates,
 * dead-lettered (in the tenant's DLQ with its last error: not lost, per the no-loss invariant, but
 * reported — the sinks here always answer 200) and lost (neither). On loss it also reports what the
 * workers say they still hold, to tell "late" from "gone".
 */
export async function settle(
  load: LoadGen,
  sink: Sink,
  tag: string,
  timeoutMs: number,
  c?: SpillwayCluster,
  tid = 'acme',
) {
  const want = load.accepted.size;
  // Compare ids, not counts: an event answered 503 (or cut off) can still have been committed and
  // delivered, so the sink's count can reach `want` while an accepted one is still on its way.
  await waitFor(
    async () => {
      const st = await sink.stats(tag);
      if (st.unique < want) return false;
      const ids = new Set((await sink.stats(tag, true)).ids ?? []);
      for (const id of load.accepted) if (!ids.has(id)) return false;
      return true;
    },
    'every accepted event to be delivered',
    timeoutMs,
    500,
  ).catch(() => {});
  const st = await sink.stats(tag, true);
  const seen = new Set(st.ids ?? []);
  const dlq = new Set<string>();
  let state = '';
  if (c && seen.size < want) {
    const raw = (await c.redis.lrange(createKeys(c.prefix).dlq(tid), 0, 100_000).catch(() => [])) as string[];
    for (const r of raw) {
      try {
        dlq.add((JSON.parse(r) as { eventId: string }).eventId);
      } catch {}
    }
    state = JSON.stringify(await tenantCounters(c, tid).catch(() => ({})));
  }
  let delivered = 0;
  let deadLettered = 0;
  const missing: string[] = [];
  for (const id of load.accepted) {
    if (seen.has(id)) delivered++;
    else if (dlq.has(id)) deadLettered++;
    else if (missing.length < 5) missing.push(id);
  }
  // Diagnostics on loss: what the event log says happened to the first missing event (accepted?
  // attempted? with which outcome?), from any live role's admin API.
  let trace = '';
  if (c && missing.length) trace = await attemptsOf(c, tid, missing[0]!);
  return {
    delivered,
    deadLettered,
    lost: want - delivered - deadLettered,
    duplicates: st.dupes,
    missing,
    /** Worker counters for the tenant when something was missing (queued, spilled, retrying…). */
    state,
    /** The event log's attempts for the first missing event, as the admin API returns them. */
    trace,
    extraDelivered: seen.size - delivered,
  };
}

async function attemptsOf(c: SpillwayCluster, tid: string, eventId: string): Promise<string> {
  for (const r of c.roles) {
    if (r.proc.child.exitCode !== null) continue;
    try {
      const res = await fetch(
        `http://127.0.0.1:${r.adminPort}/v1/tenants/${tid}/events/${encodeURIComponent(eventId)}/attempts`,
        { headers: { authorization: `Bearer ${c.adminToken}` }, signal: AbortSignal.timeout(5000) },
      );
      return `${res.status} ${(await res.text()).slice(0, 600)}`;
    } catch {}
  }
  return 'no live admin API';
}

export const toMiB = (b: number) => b / MiB;

export type Settled = Awaited<ReturnType<typeof settle>>;

/**
 * A scenario's Outcome from its load and what `settle` found. Adds to `failures` every role in
 * `roles` that died and any loss; `extra` comes after the dead-lettered count.
 */
export function outcome(o: {
  scenario: string;
  load: LoadGen;
  settled: Settled;
  roles: readonly RoleProc[];
  maxRss: number;
  extra: Record<string, string | number>;
  failures: string[];
  t0: number;
}): Outcome {
  const { load: l, settled: s, failures } = o;
  for (const r of o.roles) if (r.proc.child.exitCode !== null) failures.push(describeDeath(r));
  if (s.lost > 0)
    failures.push(
      `${s.lost} accepted events neither delivered nor dead-lettered (e.g. ${s.missing.join(', ')}; worker counters ${s.state}; attempts of ${s.missing[0]}: ${s.trace})`,
    );
  return {
    scenario: o.scenario,
    sent: l.sent,
    accepted: l.accepted.size,
    delivered: s.delivered,
    duplicates: s.duplicates,
    lost: s.lost,
    s503: l.count('503'),
    maxRssMiB: toMiB(o.maxRss),
    extra: { dead_lettered: s.deadLettered, ...o.extra },
    failures,
    seconds: (Date.now() - o.t0) / 1000,
  };
}

/** The load's answers other than 202 and 503, as `status:count,…` (or `none`). */
export function otherStatuses(l: LoadGen): string {
  return (
    [...l.statuses]
      .filter(([k]) => !['202', '503'].includes(k))
      .map(([k, v]) => `${k}:${v}`)
      .join(',') || 'none'
  );
}

/** The one tenant every scenario loads: `acme` with an endpoint on the sink (tagged `tag`) and a GitHub source. */
export async function acme(c: SpillwayCluster, sink: Sink, tag: string) {
  await c.tenant('acme', { maxInFlight: 2000, concurrency: 32 });
  await c.endpoint('acme', 'ep', sink.url('ok', tag));
  return c.githubSource('acme', 'gh');
}

/** Stops the load, the sampler, the cluster and the sink (the scenario's `finally`). */
export async function tearDown(w: {
  rss: { stop(): unknown };
  load?: LoadGen;
  c: SpillwayCluster;
  sink: Sink;
}): Promise<void> {
  w.rss.stop();
  await w.load?.stop().catch(() => {});
  await w.load?.close().catch(() => {});
  await w.c.close();
  await w.sink.close();
}

/**
 * What a restart scenario starts with: a sink that keeps delivery ids, a cluster on `prefix` whose
 * retries are spaced as in production (1 s … 20 s), and an RSS sampler over its role processes.
 */
export async function chaosWorld(prefix: string, options: SpillwayEnvOptions = {}) {
  const sink = await startSink({ trackIds: true });
  const c = new SpillwayCluster(prefix, {
    ...options,
    extra: { SPILLWAY_RETRY_SCHEDULE: '1s,2s,5s,10s,20s', ...options.extra },
  });
  const rss = rssSampler(() => c.roles.map((r) => r.proc.pid));
  return { sink, c, rss, failures: [] as string[] };
}

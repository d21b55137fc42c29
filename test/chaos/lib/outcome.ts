import { until } from '../../bench/lib/procs.ts';
import type { Sink } from '../../bench/lib/sink.ts';
import { MiB } from '../../bench/lib/stats.ts';
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

/** Waits (bounded) until the sink has seen every accepted id, then counts delivered, dupes, lost. */
export async function settle(load: LoadGen, sink: Sink, tag: string, timeoutMs: number) {
  const want = load.accepted.size;
  await until(
    async () => {
      const st = await sink.stats(tag);
      return st.unique >= want;
    },
    'every accepted event to be delivered',
    timeoutMs,
    500,
  ).catch(() => {});
  const st = await sink.stats(tag, true);
  const seen = new Set(st.ids ?? []);
  let delivered = 0;
  const missing: string[] = [];
  for (const id of load.accepted) {
    if (seen.has(id)) delivered++;
    else if (missing.length < 5) missing.push(id);
  }
  return {
    delivered,
    lost: want - delivered,
    duplicates: st.dupes,
    missing,
    extraDelivered: seen.size - delivered,
  };
}

export const toMiB = (b: number) => b / MiB;

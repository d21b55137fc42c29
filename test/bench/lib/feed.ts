import { sleep } from '../../helpers/wait.ts';
import type { Sink } from './sink.ts';

/**
 * Closed-loop feeder: keeps at most `window` deliveries outstanding (submitted × per-event minus
 * what the sink has seen) so that the delivery path is measured at its own pace instead of being
 * buried under a backlog that would spill. Bounded by `durationMs`.
 */
export async function closedLoop(o: {
  submit: () => Promise<unknown>;
  sink: Sink;
  tag: string;
  perEvent: number;
  window: number;
  durationMs: number;
  warmMs: number;
  batch?: number;
}): Promise<{ submitted: number; rate: number; submitErrors: number }> {
  const batch = o.batch ?? 100;
  const start = Date.now();
  let submitted = 0;
  let submitErrors = 0;
  let mark: { t: number; n: number } | undefined;
  for (let i = 0; i < 10_000_000 && Date.now() - start < o.durationMs; i++) {
    const seen = (await o.sink.stats(o.tag)).count;
    if (!mark && Date.now() - start >= o.warmMs) mark = { t: performance.now(), n: seen };
    if (submitted * o.perEvent - seen >= o.window) {
      await sleep(2);
      continue;
    }
    const jobs: Promise<unknown>[] = [];
    for (let j = 0; j < batch; j++) jobs.push(o.submit().catch(() => submitErrors++));
    submitted += batch;
    await Promise.all(jobs);
  }
  const end = { t: performance.now(), n: (await o.sink.stats(o.tag)).count };
  const m = mark ?? { t: start, n: 0 };
  return { submitted, rate: ((end.n - m.n) * 1000) / Math.max(1, end.t - m.t), submitErrors };
}

/**
 * Limiter cost: Redis calls per delivery for one key at 1 000/s — the LeasedLimiter alone (counted
 * by its own metric and cross-checked with Redis INFO commandstats on a private Redis), then a
 * worker delivering to an endpoint rate-limited at 1 000/s (counted from the worker's /metrics).
 */

import { LeasedLimiter } from '@spillway/delivery';
import { registry } from '@spillway/shared';
import { Redis } from 'ioredis';
import { PrivateRedis } from '../../helpers/redis-server.ts';
import { sleep, waitFor } from '../../helpers/wait.ts';
import type { Goal, Row } from '../lib/report.ts';
import { startSink } from '../lib/sink.ts';
import { commandStats, openIntake, SpillwayCluster } from '../lib/spillway.ts';
import type { Benchmark } from './types.ts';

const metricSum = (text: string, name: string) =>
  text
    .split('\n')
    .filter((l) => l.startsWith(name) && !l.startsWith('#'))
    .reduce((a, l) => a + Number(l.split(' ').at(-1)), 0);

async function commandCalls(r: Redis): Promise<number> {
  let n = 0;
  // Round trips only: commands that a script runs inside Redis are counted by commandstats too.
  for (const [cmd, { calls }] of commandStats(await r.info('commandstats')))
    if (/^(eval|evalsha|eval_ro|evalsha_ro|fcall|fcall_ro|script\|load)$/.test(cmd)) n += calls;
  return n;
}

export const limiter: Benchmark = {
  name: 'limiter',
  title: 'Limiter cost',
  method:
    "In-process: a LeasedLimiter against a private redis-server (so INFO commandstats counts only its calls), 64 callers acquiring tokens on one key with rate 1 000/s, burst 100, for 10 s (`--quick` 4 s); calls = the `spillway_limiter_redis_calls_total` delta, cross-checked with commandstats. End to end: one worker delivering a preload to an endpoint limited to 1 000/s (burst 100) on the project Redis; calls and deliveries from the worker's /metrics (`spillway_limiter_redis_calls_total`, `spillway_limiter_tokens_used_total`).",
  targets: ['≤ 0.05 Redis calls per delivery at 1 000/s on one key.'],
  async run({ quick, log }) {
    const seconds = quick ? 4 : 10;
    const rows: Row[] = [];
    const notes: string[] = [];
    const rate = { perSecond: 1000, burst: 100 };

    // 1. The limiter alone, on a Redis of its own.
    const own = new PrivateRedis(0, { aof: 'off' });
    let redis: Redis | undefined;
    try {
      await own.start();
      redis = new Redis(own.url);
      const lim = new LeasedLimiter({ redis });
      const metric = async () => metricSum(await registry.metrics(), 'spillway_limiter_redis_calls_total');
      const c0 = await metric();
      const r0 = await commandCalls(redis);
      let taken = 0;
      const t0 = performance.now();
      const caller = async () => {
        while (performance.now() - t0 < seconds * 1000) {
          await lim.acquire('{t:bench}:rate:one', rate);
          taken++;
        }
      };
      await Promise.all(Array.from({ length: 64 }, caller));
      const elapsed = (performance.now() - t0) / 1000;
      const calls = (await metric()) - c0;
      const cmd = (await commandCalls(redis)) - r0;
      await lim.close();
      log(
        `limiter alone: ${taken} tokens in ${elapsed.toFixed(1)} s, ${calls} lease calls (commandstats ${cmd})`,
      );
      rows.push({
        label: 'LeasedLimiter alone (1 key)',
        values: {
          rate: taken / elapsed,
          deliveries: taken,
          calls,
          cmd,
          perDelivery: calls / Math.max(1, taken),
        },
      });
    } catch (err) {
      notes.push(`limiter alone: ${(err as Error).message.split('\n')[0]}`);
    } finally {
      redis?.disconnect();
      await own.destroy();
    }

    // 2. End to end through a worker.
    const sink = await startSink();
    const c = new SpillwayCluster('bl');
    let feeder: Awaited<ReturnType<typeof openIntake>> | undefined;
    try {
      const N = seconds * 1000 + 2000;
      await c.tenant('acme', { maxInFlight: N + 1000, concurrency: 64 });
      await c.endpoint('acme', 'ep', sink.url('ok', 'lim'), { rate });
      feeder = await openIntake(c);
      for (let i = 0; i < N; i += 1000)
        await Promise.all(Array.from({ length: Math.min(1000, N - i) }, () => feeder!.submit('acme')));
      const w = await c.startRole('worker');
      await waitFor(async () => (await sink.stats('lim')).count > 0, 'first delivery', 30_000);
      await sleep(1000);
      const m0 = await c.metrics(w);
      const s0 = (await sink.stats('lim')).count;
      const t0 = performance.now();
      await sleep(seconds * 1000);
      const m1 = await c.metrics(w);
      const s1 = (await sink.stats('lim')).count;
      const elapsed = (performance.now() - t0) / 1000;
      const calls =
        metricSum(m1, 'spillway_limiter_redis_calls_total') -
        metricSum(m0, 'spillway_limiter_redis_calls_total');
      const delivered = s1 - s0;
      log(`worker: ${delivered} deliveries in ${elapsed.toFixed(1)} s, ${calls} lease calls`);
      if (!m1.includes('spillway_limiter_redis_calls_total'))
        notes.push('the worker does not expose spillway_limiter_redis_calls_total.');
      rows.push({
        label: 'Spillway worker, endpoint rate 1000/s',
        values: {
          rate: delivered / elapsed,
          deliveries: delivered,
          calls,
          perDelivery: calls / Math.max(1, delivered),
        },
      });
    } catch (err) {
      notes.push(`worker: ${(err as Error).message.split('\n')[0]}`);
    } finally {
      await feeder?.close().catch(() => {});
      await c.close();
      await sink.close();
    }
    const worst = rows.length ? Math.max(...rows.map((r) => r.values.perDelivery as number)) : undefined;
    const goals: Goal[] = rows.map((r) => ({
      what: `${r.label}: Redis calls per delivery`,
      target: '≤ 0.05',
      measured: r.values.perDelivery as number,
      shown: (r.values.perDelivery as number).toFixed(4),
      pass: (r.values.perDelivery as number) <= 0.05,
    }));
    void worst;
    return {
      status: rows.length === 2 ? 'ok' : 'partial',
      columns: [
        { key: 'rate', header: 'deliveries/s' },
        { key: 'deliveries', header: 'deliveries' },
        { key: 'calls', header: 'lease calls' },
        { key: 'cmd', header: 'EVAL* seen by Redis' },
        { key: 'perDelivery', header: 'calls/delivery', digits: 4 },
      ],
      rows,
      goals,
      notes,
      chart: { key: 'perDelivery', unit: 'Redis calls per delivery (lower is better; target ≤ 0.05)' },
    };
  },
};

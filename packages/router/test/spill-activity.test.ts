import { NOTE_EVERY_MS, SpillActivity } from '@spillway/router/testing';
import { afterEach, describe, expect, it } from 'vitest';
import { monitorRedis } from '../../../test/helpers/redis-monitor.ts';
import { routerRuntime } from '../../../test/helpers/router-fixtures.ts';
import { waitFor } from '../../../test/helpers/wait.ts';

const cleanup: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

describe('SpillActivity (who spilled lately)', () => {
  it(`writes the producer's notes at most every ${NOTE_EVERY_MS} ms under a flood of sends, and loses none`, async () => {
    const rt = routerRuntime();
    const activity = new SpillActivity(rt.redis, rt.keys, rt.logger);
    const key = `"${rt.keys.spillActivity}"`;
    let writes = 0;
    const monitor = await monitorRedis(rt.config.redis.url, (args) => {
      if (args[0] === '"zadd"' && args[1] === key) writes++;
    });
    cleanup.push(async () => {
      monitor.stop();
      await rt.redis.del(rt.keys.spillActivity);
      await rt.close();
    });
    // A flood's producer: a send acknowledged every 10 ms for a second, each noting its tenant.
    const tenants = Array.from({ length: 100 }, (_, i) => `t${i}`);
    const t0 = Date.now();
    for (const t of tenants) {
      activity.note([t]);
      await new Promise((r) => setTimeout(r, 10));
    }
    const took = Date.now() - t0;
    // Every tenant noted ends up in the set, none earlier than its note.
    await waitFor(
      async () => (await rt.redis.zcard(rt.keys.spillActivity)) === tenants.length,
      'every note to be written',
      5000,
    );
    const scores = await rt.redis.zrange(rt.keys.spillActivity, 0, -1, 'WITHSCORES');
    for (let i = 1; i < scores.length; i += 2) expect(Number(scores[i])).toBeGreaterThanOrEqual(t0);
    // Before: one write per note (~100 here).
    expect(writes).toBeGreaterThan(0);
    expect(writes).toBeLessThanOrEqual(Math.ceil(took / NOTE_EVERY_MS) + 2);
    // And the drainer's question still gets its answer: someone spilled since t0.
    expect(await activity.othersSince('spill', 0, 1, new Set(), t0)).toBe(true);
  });
});

/**
 * CI form of `pnpm chaos`: every scenario in its short form against real processes, Redis and
 * Kafka (own Redis / own broker where they are stopped). Fails on any loss — an event answered 2xx
 * that never reached its endpoint — and on a process that died or did not recover.
 */
import { describe, expect, it } from 'vitest';
import { line } from './lib/outcome.ts';
import { SCENARIOS } from './run.ts';

const seed = Number(process.env.SPILLWAY_CHAOS_SEED ?? Math.floor(Math.random() * 1e9));

describe(`chaos, short form (seed ${seed})`, () => {
  for (const name of Object.keys(SCENARIOS)) {
    it(name, { timeout: 240_000 }, async () => {
      const o = await SCENARIOS[name]!({ short: true, seed, log: () => {} });
      process.stdout.write(`${line(o)}\n`);
      expect(o.accepted).toBeGreaterThan(0);
      expect(o.lost).toBe(0);
      expect(o.delivered).toBe(o.accepted);
      expect(o.failures).toEqual([]);
    });
  }
});

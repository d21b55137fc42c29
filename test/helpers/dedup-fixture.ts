/**
 * What the dedup-script tests share (packages/router/test/fingerprint-*.test.ts): a connection to
 * the project Redis with the router's commands, fresh tenant bases, distinct ids, and the intake's
 * promote and reserve with small buckets, so that a few hundred ids span several epochs.
 */
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { withCommands } from '../../packages/router/src/commands/index.ts';
import { fingerprint } from '../../packages/router/src/records/fingerprints.ts';
import { testEnv } from './env.ts';

/** Bucket TTL the tests pass (ms). */
export const TTL = 120_000;
/** Entries per bucket: small, so that epochs grow within a few hundred ids. */
export const PER = 4;
/** Window-mask words per entry, as the intake passes. */
export const WORDS = 8;

export function dedupFixture(tag: string) {
  const redis = new Redis(testEnv().SPILLWAY_REDIS_URL!);
  const r = withCommands(redis as never);
  const args = (list: string[]) =>
    list.flatMap((id) => {
      const fp = fingerprint(id);
      return [fp.dedup, fp.bucket];
    });
  return {
    redis,
    r,
    args,
    /** A fresh tenant's dedup base. */
    base: () => `{${tag}-${randomBytes(4).toString('hex')}}:dd`,
    ids: (label: string, n: number) =>
      Array.from({ length: n }, (_, i) => `${label}-${randomBytes(4).toString('hex')}-${i}`),
    /**
     * The intake's promote (`check` 0) or the worker's (1) into `slot`, with `words` mask words (0:
     * a writer without masks or filters). Then the ids' "done" markers are dropped, as a minute
     * later: only the buckets answer.
     */
    async promote(b: string, slot: number, list: string[], words: number, check = 0): Promise<number> {
      const added = await r.dedupPromote(b, TTL, slot, 0, PER, check, words, ...args(list));
      await redis.del(...list.map((id) => `${b}:p:${fingerprint(id).dedup}`));
      return added;
    },
    /** The intake's reserve at `slot` over it and the `back` slots before. */
    reserve: (b: string, slot: number, list: string[], back: number) =>
      r.dedupReserve(b, 'p:test', 30_000, slot, back, ...args(list)),
    meta: (b: string, slot: number): Promise<Record<string, string>> => redis.hgetall(`${b}:${slot}:m`),
    close: () => redis.disconnect(),
  };
}

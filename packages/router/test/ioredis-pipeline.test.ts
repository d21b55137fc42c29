import { createRequire } from 'node:module';
import type { Redis as RedisType } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomPrefix } from '../../../test/helpers/env.ts';
import { withCommands } from '../src/commands/index.ts';

// ioredis as the router loads it, with patches/ioredis@5.11.1.patch applied by pnpm install.
const require = createRequire(new URL('../src/index.ts', import.meta.url));
const { Redis } = require('ioredis') as typeof import('ioredis');

const REDIS_URL = process.env.SPILLWAY_REDIS_URL ?? 'redis://127.0.0.1:6379';

describe('ioredis pipelines (patched: script commands shared per client, not copied per pipeline)', () => {
  let redis: RedisType;
  const prefix = randomPrefix('pipe');
  beforeAll(async () => {
    redis = new Redis(REDIS_URL, { lazyConnect: true });
    await redis.connect();
    // The router's own scripts, plus more as BullMQ adds its own to a shared connection.
    withCommands(redis as never);
    for (let i = 0; i < 40; i++)
      redis.defineCommand(`spwTestEcho${i}`, { numberOfKeys: 1, lua: `return {KEYS[1], ARGV[1], ${i}}` });
  });
  afterAll(async () => {
    // The only keys these tests write.
    await redis.del(`${prefix}:x`, `${prefix}:m`);
    redis.disconnect();
  });

  it('puts no per-client command on the pipeline itself, and the commands still run', async () => {
    const pipe = redis.pipeline() as unknown as Record<string, unknown> & ReturnType<RedisType['pipeline']>;
    // Unpatched, every pipeline got an own property per script and its Buffer variant (two per
    // script: with ~65 scripts defined, ~27 µs of CPU and several KiB per pipeline).
    const own = Object.keys(pipe).filter((k) => k.startsWith('spwTestEcho'));
    expect(own).toEqual([]);
    expect(typeof pipe.spwTestEcho3).toBe('function');
    expect(typeof pipe.spwTestEcho3Buffer).toBe('function');
    (pipe.spwTestEcho3 as (k: string, a: string) => unknown)(`${prefix}:k`, 'a');
    pipe.set(`${prefix}:x`, '1');
    (pipe.spwTestEcho7Buffer as (k: string, a: string) => unknown)(`${prefix}:k`, 'b');
    expect(pipe.length).toBe(3);
    const res = await pipe.exec();
    expect(res?.[0]).toEqual([null, [`${prefix}:k`, 'a', 3]]);
    expect(res?.[1]).toEqual([null, 'OK']);
    const [err, buf] = res?.[2] ?? [];
    expect(err).toBeNull();
    expect((buf as Buffer[])[1]!.toString()).toBe('b');
  });

  it('sees commands defined after earlier pipelines were made', async () => {
    await redis.pipeline().ping().exec();
    redis.defineCommand('spwTestLate', { numberOfKeys: 0, lua: 'return "late"' });
    const pipe = redis.pipeline() as unknown as Record<string, (...a: unknown[]) => unknown> &
      ReturnType<RedisType['pipeline']>;
    pipe.spwTestLate!();
    expect(await pipe.exec()).toEqual([[null, 'late']]);
  });

  it('loads a script the server does not have yet (NOSCRIPT) inside a pipeline', async () => {
    // A script text no one has run before: EVALSHA answers NOSCRIPT and the pipeline loads it.
    const tag = prefix.replace(/\W/g, '');
    redis.defineCommand('spwTestFresh', { numberOfKeys: 0, lua: `return "${tag}"` });
    const pipe = redis.pipeline() as unknown as Record<string, (...a: unknown[]) => unknown> &
      ReturnType<RedisType['pipeline']>;
    pipe.spwTestFresh!();
    expect(await pipe.exec()).toEqual([[null, tag]]);
  });

  it('keeps multi() transactions working', async () => {
    const res = await redis.multi().set(`${prefix}:m`, 'v').get(`${prefix}:m`).exec();
    expect(res).toEqual([
      [null, 'OK'],
      [null, 'v'],
    ]);
  });
});

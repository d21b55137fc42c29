/**
 * Redis execution time of the ingest path's scripts per event (docs/benchmarks/ingest-profile.md),
 * without HTTP: on a fresh tenant base, batches of B distinct events go through what the ingest
 * role runs for each GitHub event — body-claim-1, dedup-reserve-1, dedup-promote-1 — and each
 * script's server-side time is read from `INFO commandstats` deltas (EVALSHA usec) around its calls.
 *
 *   node test/bench/lib/lua-cost.ts [events=30000] [batch=20] [luaLibDir]
 *
 * `luaLibDir` replaces packages/shared/src/lua (to compare another fingerprints.lua on the same data).
 */
import { createHash, randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { Redis } from 'ioredis';
import { REDIS_URL } from './spillway.ts';

const total = Number(process.argv[2] ?? 30_000);
const B = Number(process.argv[3] ?? 20);
const lib = process.argv[4] ?? new URL('../../../packages/shared/src/lua/', import.meta.url).pathname;
const read = (p: string) =>
  readFileSync(p, 'utf8').replace(/^--@include (\S+\.lua)\s*$/gm, (_l, f: string) =>
    readFileSync(`${lib}/${f}`, 'utf8'),
  );
const root = new URL('../../../packages/', import.meta.url).pathname;
const redis = new Redis(REDIS_URL);
const load = async (p: string) => (await redis.script('LOAD', read(`${root}${p}`))) as string;
const claim = await load('ingest/src/commands/body-claim-1.lua');
const reserve = await load('router/src/commands/dedup-reserve-1.lua');
const promote = await load('router/src/commands/dedup-promote-1.lua');

const tag = `lc-${randomBytes(3).toString('hex')}`;
const bc = `${tag}:{t:acme}:bc`;
const dd = `${tag}:{t:acme}:dd`;
const slotMs = 3_600_000;
const slot = Math.floor(Date.now() / slotMs);
const back = 24;
const ttl = 25 * slotMs;

async function evalUs(): Promise<number> {
  const info = (await redis.info('commandstats')) as string;
  return Number(/cmdstat_evalsha:calls=\d+,usec=(\d+)/.exec(info)?.[1] ?? 0);
}

const spent = { claim: 0, reserve: 0, promote: 0 };
let measured = 0;
const hex = (s: string) => createHash('sha256').update(s).digest();
for (let done = 0; done < total; done += B) {
  const ids = Array.from({ length: B }, (_, i) => `${tag}-${done + i}`);
  const fps = ids.map((id) => hex(id));
  const bodies = ids.map((id) => hex(`body ${id}`));
  const claimArgs = bodies.flatMap((b, i) => [
    b.toString('hex', 0, 8),
    fps[i]!.toString('hex', 0, 8),
    b.readUInt32BE(8),
  ]);
  const idArgs = fps.flatMap((f) => [f.toString('hex', 0, 8), f.readUInt32BE(8)]);
  const timing = done >= total / 2;
  let t = await evalUs();
  const step = async (k: keyof typeof spent, f: () => Promise<unknown>) => {
    await f();
    const t1 = await evalUs();
    if (timing) spent[k] += t1 - t;
    t = await evalUs();
  };
  await step('claim', () => redis.evalsha(claim, 1, bc, ttl, slot, back, 128, ...claimArgs));
  await step('reserve', () => redis.evalsha(reserve, 1, dd, 'p:x', 30_000, slot, back, ...idArgs));
  await step('promote', () => redis.evalsha(promote, 1, dd, ttl, slot, back, 256, 0, ...idArgs));
  if (timing) measured += B;
}
console.log(
  `lib ${lib}: ${total} events in batches of ${B}; second half, µs per event (server, EVALSHA): ` +
    Object.entries(spent)
      .map(([k, v]) => `${k} ${(v / measured).toFixed(1)}`)
      .join(', ') +
    `, sum ${((spent.claim + spent.reserve + spent.promote) / measured).toFixed(1)}`,
);
// Clean up this run's keys.
let cursor = '0';
do {
  const [next, keys] = (await redis.scan(cursor, 'MATCH', `${tag}:*`, 'COUNT', 1000)) as [string, string[]];
  if (keys.length) await redis.unlink(...keys);
  cursor = next;
} while (cursor !== '0');
redis.disconnect();

/**
 * Redis execution time of the ingest path's scripts per event (docs/benchmarks/ingest-profile.md),
 * without HTTP: on a fresh tenant base, batches of B distinct events go through what the ingest
 * role runs for each GitHub event — dedup-reserve-1 and dedup-promote-1 (on the body's key since
 * 2026-12-07; a tree from before also has body-claim-1, the separate body lookup, which runs
 * first when LUA_COST_ROOT points at one) — and each script's server-side time is read from
 * `INFO commandstats` deltas (EVALSHA usec) around its calls.
 *
 *   node test/bench/lib/lua-cost.ts [events=30000] [batch=20] [luaLibDir|-] [perSlot=0]
 *
 * `luaLibDir` replaces packages/shared/src/lua (to compare another fingerprints.lua on the same data;
 * `-` for the default). `perSlot` > 0 first fills each of the window's 24 earlier slots with that
 * many claims and ids (a window in steady state: a benchmark's fresh prefix has only the current
 * slot, so its lookups read fewer buckets than production's). LUA_COST_CLAIM_PER / LUA_COST_ID_PER
 * set the target entries per bucket (default 128 / 256, what ingest and the intake pass).
 * LUA_COST_LEAD=1 fills one more slot, just before the window: the oldest slot of the window is then
 * sized from a full slot like the rest (a tenant past its first day), not grown from empty.
 * LUA_COST_ROOT replaces packages/ for the three scripts themselves (another tree's
 * body-claim-1, dedup-reserve-1 and dedup-promote-1, e.g. an exported older commit's, with its
 * `luaLibDir`), so two versions of the scripts alternate on the same machine state. Scripts that
 * take window-mask words (their header says so) get LUA_COST_MASK_WORDS (default 8, what ingest and
 * the intake pass; 0 = no mask).
 */
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { Redis } from 'ioredis';
import { commandStats, REDIS_URL } from './spillway.ts';

const total = Number(process.argv[2] ?? 30_000);
const B = Number(process.argv[3] ?? 20);
const lib =
  process.argv[4] && process.argv[4] !== '-'
    ? process.argv[4]
    : new URL('../../../packages/shared/src/lua/', import.meta.url).pathname;
const perSlot = Number(process.argv[5] ?? 0);
/** Target entries per bucket (the callers' CLAIMS_PER_BUCKET and DEDUP_PER_BUCKET unless set). */
const claimPer = Number(process.env.LUA_COST_CLAIM_PER ?? 128);
const idPer = Number(process.env.LUA_COST_ID_PER ?? 256);
const read = (p: string) =>
  readFileSync(p, 'utf8').replace(/^--@include (\S+\.lua)\s*$/gm, (_l, f: string) =>
    readFileSync(`${lib}/${f}`, 'utf8'),
  );
const root = process.env.LUA_COST_ROOT
  ? `${process.env.LUA_COST_ROOT.replace(/\/$/, '')}/`
  : new URL('../../../packages/', import.meta.url).pathname;
const redis = new Redis(REDIS_URL);
const load = async (p: string) => (await redis.script('LOAD', read(`${root}${p}`))) as string;
/** Trees from before 2026-12-07 only: the body claim, a second lookup per GitHub event. */
const CLAIM = 'ingest/src/commands/body-claim-1.lua';
const claim = existsSync(`${root}${CLAIM}`) ? await load(CLAIM) : undefined;
const reserve = await load('router/src/commands/dedup-reserve-1.lua');
const promote = await load('router/src/commands/dedup-promote-1.lua');
/** The mask-words argument, for scripts that take one (none for a tree from before masks). */
const fbits =
  claim === undefined || read(`${root}${CLAIM}`).includes('ARGV[5]')
    ? [Number(process.env.LUA_COST_MASK_WORDS ?? 8)]
    : [];

const tag = `lc-${randomBytes(3).toString('hex')}`;
const bc = `${tag}:{t:acme}:bc`;
const dd = `${tag}:{t:acme}:dd`;
const slotMs = 3_600_000;
const slot = Math.floor(Date.now() / slotMs);
const back = 24;
const ttl = 25 * slotMs;

async function evalUs(): Promise<number> {
  return commandStats(await redis.info('commandstats')).get('evalsha')?.usec ?? 0;
}

// A window in steady state: the 24 earlier slots filled as the current one will be (appends only,
// through the same scripts, with their slot number as the current one).
const fillHex = (s: string) => createHash('sha256').update(s).digest();
// Oldest first, as time fills them: a slot's first epoch is sized from the slot before it.
const lead = process.env.LUA_COST_LEAD === '1' ? 1 : 0;
for (let k = back + lead; k >= 1 && perSlot > 0; k--) {
  for (let done = 0; done < perSlot; done += 200) {
    const fps = Array.from({ length: 200 }, (_, i) => fillHex(`${tag}-fill-${k}-${done + i}`));
    const idArgs = fps.flatMap((f) => [f.toString('hex', 0, 8), f.readUInt32BE(8)]);
    const claimArgs = fps.flatMap((f) => {
      const b = fillHex(`body ${f.toString('hex')}`);
      return [b.toString('hex', 0, 8), f.toString('hex', 0, 8), b.readUInt32BE(8)];
    });
    // back 0: the fill does not search the window, it only appends to slot - k.
    if (claim) await redis.evalsha(claim, 1, bc, ttl, slot - k, 0, claimPer, ...fbits, ...claimArgs);
    await redis.evalsha(promote, 1, dd, ttl, slot - k, 0, idPer, 0, ...fbits, ...idArgs);
  }
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
  if (claim)
    await step('claim', () => redis.evalsha(claim, 1, bc, ttl, slot, back, claimPer, ...fbits, ...claimArgs));
  await step('reserve', () => redis.evalsha(reserve, 1, dd, 'p:x', 30_000, slot, back, ...idArgs));
  await step('promote', () => redis.evalsha(promote, 1, dd, ttl, slot, back, idPer, 0, ...fbits, ...idArgs));
  if (timing) measured += B;
}
console.log(
  `${process.env.LUA_COST_ROOT ? `scripts ${root}, ` : ''}lib ${lib}, per bucket ${claimPer}/${idPer}${fbits.length ? `, mask words ${fbits[0]}` : ''}: ${perSlot > 0 ? `window filled (${perSlot} per earlier slot${lead ? ', one more before it' : ''}), ` : ''}${total} events in batches of ${B}; second half, µs per event (server, EVALSHA): ` +
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

import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { testEnv } from '../../../test/helpers/env.ts';
import { GROWING_CALLS } from '../../../test/helpers/fingerprint-calls.ts';
import { startPrivateRedis } from '../../../test/helpers/redis-server.ts';

/**
 * The fingerprint-bucket helpers of packages/shared/src/lua/fingerprints.lua on a real Redis:
 * `append_buffered` + `flush_appends` (every script that writes buckets) must leave exactly the
 * keys, values and TTLs that the reference below, one write per entry, leaves, across epoch growth
 * inside one call and across calls, and a new slot's start epoch taken from the slot before.
 */
const REFERENCE = `
local function append(base, slot, entry, h, per, ttl)
  local meta = base .. ':' .. slot .. ':m'
  local e0 = tonumber(redis.call('HGET', meta, 'e0'))
  if not e0 then
    local prev = tonumber(redis.call('HGET', base .. ':' .. (slot - 1) .. ':m', 'n') or '0')
    e0 = 0
    while per * 2 ^ e0 < prev and e0 < 20 do e0 = e0 + 1 end
    redis.call('HSET', meta, 'e0', e0, 'l', e0)
  end
  local n = redis.call('HINCRBY', meta, 'n', 1)
  local e, cap = e0, per * 2 ^ e0
  while n > cap and e < 24 do
    e = e + 1
    cap = cap + per * 2 ^ e
  end
  if e > tonumber(redis.call('HGET', meta, 'l')) then redis.call('HSET', meta, 'l', e) end
  redis.call('PEXPIRE', meta, ttl)
  local k = base .. ':' .. slot .. ':' .. e .. ':' .. math.fmod(h, 2 ^ e)
  redis.call('SET', k, (redis.call('GET', k) or '') .. entry, 'PX', ttl)
end
`;
const lib = readFileSync(
  new URL('../../../packages/shared/src/lua/fingerprints.lua', import.meta.url),
  'utf8',
);
const SCRIPT = `${lib}
${REFERENCE}
local mode, base, ttl, per = ARGV[1], KEYS[1], ARGV[2], tonumber(ARGV[3])
for i = 4, #ARGV, 3 do
  if mode == 'b' then append_buffered(base, tonumber(ARGV[i]), ARGV[i + 1], tonumber(ARGV[i + 2]), per)
  else append(base, tonumber(ARGV[i]), ARGV[i + 1], tonumber(ARGV[i + 2]), per, ttl) end
end
if mode == 'b' then flush_appends(ttl) end
return 1`;

const redis = new Redis(testEnv().SPILLWAY_REDIS_URL!);
afterAll(() => redis.disconnect());

async function dump(base: string): Promise<Record<string, unknown>> {
  const out: Record<string, unknown> = {};
  for (const k of await redis.keys(`${base}:*`)) {
    const rel = k.slice(base.length);
    const type = await redis.type(k);
    if (type === 'hash') {
      // `c`: how far the slot after it has compacted this slot (the reference does not compact).
      const { c: _, ...h } = await redis.hgetall(k);
      out[rel] = h;
    } else out[rel] = await redis.getBuffer(k).then((b) => b?.toString('hex'));
    expect(await redis.pttl(k), `${rel} has a TTL`).toBeGreaterThan(0);
  }
  return out;
}

describe('fingerprint buckets (fingerprints.lua)', () => {
  it('a buffered flush writes what one write per entry writes', async () => {
    const tag = randomBytes(4).toString('hex');
    const immediate = `{fp-${tag}}:a`;
    const buffered = `{fp-${tag}}:b`;
    const PER = 3;
    // Calls of 1 to 300 entries over slots 100-102: epochs grow inside a call and between calls.
    for (const [slot, n] of GROWING_CALLS) {
      const args: (string | number)[] = [];
      for (let i = 0; i < n; i++)
        args.push(slot, randomBytes(3).toString('latin1'), randomBytes(4).readUInt32BE());
      await redis.eval(SCRIPT, 1, immediate, 'i', 60_000, PER, ...args);
      await redis.eval(SCRIPT, 1, buffered, 'b', 60_000, PER, ...args);
    }
    const a = await dump(immediate);
    const b = await dump(buffered);
    expect(Object.keys(a).length).toBeGreaterThan(10);
    // A later epoch was reached, and slot 101 started past epoch 0 (slot 100 held 321 entries).
    expect(Number((a[':100:m'] as Record<string, string>).l)).toBeGreaterThan(3);
    expect(Number((a[':101:m'] as Record<string, string>).e0)).toBeGreaterThan(0);
    expect(b).toEqual(a);
  });

  it('an existing bucket takes only the new entries (APPEND): the AOF grows by the entry, not by the bucket', async () => {
    // A private Redis with its own AOF: the growth counted is this test's alone.
    const own = await startPrivateRedis({ aof: 'everysec' });
    const r = new Redis(own.url);
    try {
      const base = `{fp-${randomBytes(4).toString('hex')}}:a`;
      // One bucket (per 10,000: epoch 0 has one), 400 calls of one 8-byte entry each.
      const write = (slot: number, i: number) =>
        r.eval(SCRIPT, 1, base, 'b', 600_000, 10_000, slot, randomBytes(8), i);
      await write(100, 0);
      const aofSize = async () => Number(/aof_current_size:(\d+)/.exec(await r.info('persistence'))![1]);
      // AOF bytes per call over calls 1-50 (a bucket of up to 400 B) and 351-400 (~3 KiB).
      const growth = async (from: number, to: number) => {
        const before = await aofSize();
        for (let i = from; i <= to; i++) await write(100, i);
        return ((await aofSize()) - before) / (to - from + 1);
      };
      const early = await growth(1, 50);
      await growth(51, 350);
      const late = await growth(351, 400);
      // With the whole bucket written each call (SET) the late calls wrote ~2.8 KiB more each; with
      // APPEND a call writes the same whatever the bucket holds: the entry, the slot meta's count
      // and expiry, the command framing.
      expect(Math.abs(late - early)).toBeLessThan(40);
      expect(late).toBeLessThan(400);
      const bucket = `${base}:100:0:0`;
      expect((await r.getBuffer(bucket))!.length).toBe(401 * 8);
      expect(await r.pttl(bucket)).toBeGreaterThan(500_000);
    } finally {
      r.disconnect();
      await own.destroy();
    }
  });

  it("the slot after a bucket's takes back APPEND's spare allocation (compaction), bucket by bucket", async () => {
    const base = `{fp-${randomBytes(4).toString('hex')}}:a`;
    const PER = 8;
    // Slot 100: 20 calls of 40 entries, spread over its buckets (epoch growth makes several).
    for (let c = 0; c < 20; c++) {
      const args: (string | number | Buffer)[] = [];
      for (let i = 0; i < 40; i++) args.push(100, randomBytes(8), randomBytes(4).readUInt32BE());
      await redis.eval(SCRIPT, 1, base, 'b', 60_000, PER, ...args);
    }
    const keys100 = (await redis.keys(`${base}:100:*`)).filter((k) => !k.endsWith(':m'));
    expect(keys100.length).toBeGreaterThan(16); // more than one call's step
    const usage = async (ks: string[]) => {
      let n = 0;
      for (const k of ks) n += Number(await redis.memory('USAGE', k, 'SAMPLES', 0));
      return n;
    };
    const contents = new Map<string, string>();
    for (const k of keys100) contents.set(k, (await redis.getBuffer(k))!.toString('hex'));
    const appended = await usage(keys100);
    // Calls in slot 101 compact slot 100, 16 buckets a call, until every bucket is done.
    const m = await redis.hgetall(`${base}:100:m`);
    const buckets = 2 ** (Number(m.l) + 1) - 2 ** Number(m.e0);
    let calls = 0;
    while (Number((await redis.hget(`${base}:100:m`, 'c')) ?? 0) < buckets) {
      await redis.eval(SCRIPT, 1, base, 'b', 60_000, PER, 101, randomBytes(8), calls);
      calls++;
      expect(calls).toBeLessThan(100);
    }
    expect(calls).toBe(Math.ceil(buckets / 16));
    const compacted = await usage(keys100);
    // Same bytes, TTLs kept.
    for (const [k, hex] of contents) {
      expect((await redis.getBuffer(k))!.toString('hex')).toBe(hex);
      expect(await redis.pttl(k)).toBeGreaterThan(0);
    }
    // What the same bytes take when written once, under the same names.
    for (const [k, hex] of contents) await redis.set(k, Buffer.from(hex, 'hex'), 'PX', 60_000);
    const exact = await usage(keys100);
    expect(compacted).toBe(exact);
    expect(appended).toBeGreaterThan(exact);
  });
});

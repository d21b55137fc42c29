import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { testEnv } from '../../../test/helpers/env.ts';
import { GROWING_CALLS } from '../../../test/helpers/fingerprint-calls.ts';

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
    out[rel] =
      type === 'hash' ? await redis.hgetall(k) : await redis.getBuffer(k).then((b) => b?.toString('hex'));
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
});

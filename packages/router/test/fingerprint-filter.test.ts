import { afterAll, describe, expect, it } from 'vitest';
import { dedupFixture, PER, TTL, WORDS } from '../../../test/helpers/dedup-fixture.ts';
import { fingerprint } from '../src/records/fingerprints.ts';

/**
 * The epoch filters of the dedup slots (packages/shared/src/lua/fingerprints.lua; docs/storage.md,
 * "Epoch filters") through dedup-promote-1 and dedup-reserve-1, on a real Redis. Every entry of a
 * filtered epoch sets its two bits (checked against the layout computed here), a lookup skips an
 * epoch whose bits are not both set (a bucket it must not read is made unreadable), and a filter may
 * only ever save a bucket read: an id a writer without filters appended, or a false positive, is
 * still answered by the buckets.
 */
const { redis, base, ids, promote, meta, close, ...f } = dedupFixture('ef');
afterAll(close);
const reserve = (b: string, slot: number, list: string[], back = 0) => f.reserve(b, slot, list, back);

/**
 * fingerprints.lua's FILTER_BITS (filter bits per entry of a full epoch) and FILTER_SKIP (a slot's
 * first epochs, which have none).
 */
const FILTER_BITS = 8;
const FILTER_SKIP = 2;
const S = 5000;

/** The two filter bits of `id` in epoch `e` of a slot whose meta is `m` (the layout of storage.md). */
function filterBits(m: Record<string, string>, id: string, e: number): [number, number] {
  const hex = fingerprint(id).dedup;
  const x = Number.parseInt(hex.slice(0, 8), 16);
  const y = Number.parseInt(hex.slice(8, 16), 16);
  const fb = Number(m.fb);
  const block = fb * (2 ** e - 2 ** (Number(m.e0) + FILTER_SKIP)) + (x % (fb * 2 ** e));
  return [32 * block + (y % 32), 32 * block + (Math.floor(y / 32) % 32)];
}

async function inFilter(b: string, slot: number, id: string, e: number): Promise<boolean> {
  const [p, q] = filterBits(await meta(b, slot), id, e);
  const f = `${b}:${slot}:f`;
  return (await redis.getbit(f, p)) === 1 && (await redis.getbit(f, q)) === 1;
}

/** The epoch whose bucket holds `id` in `slot` (read from the buckets themselves), or -1. */
async function epochOf(b: string, slot: number, id: string): Promise<number> {
  const m = await meta(b, slot);
  const fp = Buffer.from(fingerprint(id).dedup, 'hex');
  for (let e = Number(m.e0); e <= Number(m.l); e++) {
    const v = await redis.getBuffer(`${b}:${slot}:${e}:${fingerprint(id).bucket % 2 ** e}`);
    for (let i = 0; v && i + 8 <= v.length; i += 8) if (v.subarray(i, i + 8).equals(fp)) return e;
  }
  return -1;
}

describe('dedup epoch filters', () => {
  it('every entry past the first two epochs sets its two bits in its own epoch, in a slot that grows over several epochs; the filter expires with the slot', async () => {
    const b = base();
    const list = ids('grow', 300);
    // A tenant's first slot (no window mask), in calls of growing size.
    for (const [from, to] of [
      [0, 1],
      [1, 21],
      [21, 300],
    ] as const)
      await promote(b, S, list.slice(from, to), WORDS);
    const m = await meta(b, S);
    expect(m).not.toHaveProperty('w');
    expect(m.fb).toBe(String(Math.max(1, (FILTER_BITS * PER) / 32)));
    expect(m.gn).toBe(m.n);
    expect(Number(m.n)).toBe(300);
    expect(Number(m.l) - Number(m.e0)).toBeGreaterThanOrEqual(5);
    let filtered = 0;
    for (const id of list) {
      const e = await epochOf(b, S, id);
      expect(e, id).toBeGreaterThanOrEqual(0);
      if (e < Number(m.e0) + FILTER_SKIP) continue;
      expect(await inFilter(b, S, id, e), id).toBe(true);
      filtered++;
    }
    // The first two epochs hold PER * (1 + 2) entries.
    expect(filtered).toBe(300 - PER * 3);
    const ttl = await redis.pttl(`${b}:${S}:f`);
    expect(ttl).toBeGreaterThan(0);
    expect(ttl).toBeLessThanOrEqual(TTL);
    expect(await reserve(b, S, list)).toEqual(Array(300).fill('d'));
    expect(await reserve(b, S, ids('other', 50))).toEqual(Array(50).fill(0));
  });

  it('a lookup reads no bucket of an epoch whose filter bits are not both set', async () => {
    const b = base();
    await promote(b, S, ids('grow', 200), WORDS);
    const m = await meta(b, S);
    // A new id and, in the last epoch, its bucket made unreadable (a HASH): a lookup that read it
    // would fail with WRONGTYPE. Pick an id whose bits in that epoch are not both set.
    const l = Number(m.l);
    let id = '';
    for (let k = 0; !id; k++) if (!(await inFilter(b, S, `new-${k}`, l))) id = `new-${k}`;
    const key = `${b}:${S}:${l}:${fingerprint(id).bucket % 2 ** l}`;
    const kept = await redis.getBuffer(key);
    await redis.del(key);
    await redis.hset(key, 'x', '1');
    await redis.pexpire(key, TTL);
    expect(await reserve(b, S, [id])).toEqual([0]);
    // The same bucket for an id whose bits are set is read: the trap is real.
    await redis.del(`${b}:p:${fingerprint(id).dedup}`);
    const f = `${b}:${S}:f`;
    for (const o of filterBits(m, id, l)) await redis.setbit(f, o, 1);
    await expect(reserve(b, S, [id])).rejects.toThrow(/WRONGTYPE/);
    if (kept) await redis.set(key, kept, 'PX', TTL);
  });

  it("a filter's false positive is not a duplicate: the bucket decides", async () => {
    const b = base();
    await promote(b, S, ids('grow', 100), WORDS);
    const m = await meta(b, S);
    const ghost = 'ghost';
    const f = `${b}:${S}:f`;
    for (let e = Number(m.e0) + FILTER_SKIP; e <= Number(m.l); e++)
      for (const o of filterBits(m, ghost, e)) await redis.setbit(f, o, 1);
    expect(await reserve(b, S, [ghost])).toEqual([0]);
  });

  it('an id a writer without filters appends is found: the slot stops using its filter', async () => {
    const b = base();
    const list = ids('in', 100);
    await promote(b, S, list, WORDS);
    const m = await meta(b, S);
    // An id the filter does not have in any epoch, so that a lookup that trusted it would miss it.
    let late = '';
    for (let k = 0; !late; k++) {
      const cand = `late-${k}`;
      let any = false;
      for (let e = Number(m.e0) + FILTER_SKIP; e <= Number(m.l) + 1; e++)
        any ||= await inFilter(b, S, cand, e);
      if (!any) late = cand;
    }
    await promote(b, S, [late], 0);
    const m1 = await meta(b, S);
    expect(Number(m1.n)).toBe(101);
    expect(m1.gn).toBe(m.gn);
    expect(await reserve(b, S, [late])).toEqual(['d']);
    // A writer with filters does not make it usable again; everything is still found.
    await redis.del(`${b}:p:${fingerprint(late).dedup}`);
    await promote(b, S, ids('more', 10), WORDS);
    expect((await meta(b, S)).gn).toBe(m.gn);
    expect(await reserve(b, S, [late, ...list])).toEqual(Array(101).fill('d'));
  });

  it('a slot written before filters existed is read bucket by bucket, and the next slot gets one', async () => {
    const b = base();
    const old = ids('old', 60);
    await promote(b, S - 1, old, WORDS);
    // As an older process left it: no filter fields, no filter key.
    await redis.hdel(`${b}:${S - 1}:m`, 'fb', 'gn');
    await redis.del(`${b}:${S - 1}:f`);
    const fresh = ids('new', 60);
    await promote(b, S, fresh, WORDS);
    expect((await meta(b, S)).gn).toBe('60');
    expect(await reserve(b, S, [...old, ...fresh], 1)).toEqual(Array(120).fill('d'));
    expect(await reserve(b, S, ids('other', 30), 1)).toEqual(Array(30).fill(0));
  });

  it("the slot after it rewrites the filter (dropping the string's spare allocation), bytes and TTL kept", async () => {
    const b = base();
    await promote(b, S, ids('grow', 300), WORDS);
    const f = `${b}:${S}:f`;
    const before = await redis.getBuffer(f);
    await redis.pexpire(f, TTL - 10_000);
    await promote(b, S + 1, ids('next', 5), WORDS);
    expect(await redis.getBuffer(f)).toEqual(before);
    const ttl = await redis.pttl(f);
    expect(ttl).toBeGreaterThan(0);
    expect(ttl).toBeLessThanOrEqual(TTL - 10_000);
    expect(Number((await meta(b, S)).c)).toBeGreaterThan(0);
  });
});

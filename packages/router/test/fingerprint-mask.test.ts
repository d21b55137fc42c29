import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { testEnv } from '../../../test/helpers/env.ts';
import { withCommands } from '../src/commands/index.ts';
import { fingerprint } from '../src/records/fingerprints.ts';

/**
 * The membership filters in front of the dedup buckets (packages/shared/src/lua/fingerprints.lua;
 * docs/storage.md, "Membership filters") through the scripts that use them, dedup-promote-1 and
 * dedup-reserve-1, on a real Redis. A filter may only ever save a bucket read: an id whose slot was
 * written without filters, or by a writer without them after the filters existed, is still found,
 * and a filter's false positive is never a duplicate.
 */
const redis = new Redis(testEnv().SPILLWAY_REDIS_URL!);
const r = withCommands(redis as never);
afterAll(() => redis.disconnect());

const TTL = 120_000;
/** Small buckets, so that a few hundred ids span several epochs. */
const PER = 4;
const BITS = 8;
const S = 1000;

const base = () => `{ff-${randomBytes(4).toString('hex')}}:dd`;
const ids = (label: string, n: number) =>
  Array.from({ length: n }, (_, i) => `${label}-${randomBytes(4).toString('hex')}-${i}`);
const args = (list: string[]) =>
  list.flatMap((id) => {
    const fp = fingerprint(id);
    return [fp.dedup, fp.bucket];
  });

/**
 * The intake's promote (no check) into `slot`, with `fbits` filter bits (0: a writer without
 * filters). Then the ids' "done" markers are dropped, as a minute later: only the buckets answer.
 */
async function promote(b: string, slot: number, list: string[], fbits: number, check = 0): Promise<number> {
  const added = await r.dedupPromote(b, TTL, slot, 0, PER, check, fbits, ...args(list));
  await redis.del(...list.map((id) => `${b}:p:${fingerprint(id).dedup}`));
  return added;
}
/** The intake's reserve at `slot` over it and the slot before. */
const reserve = (b: string, slot: number, list: string[]) =>
  r.dedupReserve(b, 'p:test', 30_000, slot, 1, ...args(list));

async function meta(b: string, slot: number): Promise<Record<string, number>> {
  const h = await redis.hgetall(`${b}:${slot}:m`);
  return Object.fromEntries(Object.entries(h).map(([k, v]) => [k, Number(v)]));
}

/** Whether both filter bits of `id` are set in epoch `e` of `slot` (a missing filter: no). */
async function inFilter(b: string, slot: number, e: number, id: string): Promise<boolean> {
  const m = await meta(b, slot);
  if (!m.f) return false;
  const size = m.f * 2 ** e;
  const hex = fingerprint(id).dedup;
  const a = Number.parseInt(hex.slice(0, 8), 16) % size;
  const c = Number.parseInt(hex.slice(8, 16), 16) % size;
  const [x, y] = await Promise.all([
    redis.getbit(`${b}:${slot}:${e}:f`, a),
    redis.getbit(`${b}:${slot}:${e}:f`, c),
  ]);
  return x === 1 && y === 1;
}

/** A filtered slot `S` (its slot before held more than one bucket's worth) with 100 ids in it. */
async function filteredSlot(b: string): Promise<string[]> {
  await promote(b, S - 1, ids('prev', 50), BITS);
  const list = ids('in', 100);
  await promote(b, S, list, BITS);
  const m = await meta(b, S);
  expect(m.f).toBe(BITS * PER);
  expect(m.fn).toBe(m.n);
  expect(m.e0).toBeGreaterThanOrEqual(1);
  expect(m.fe).toBe(m.e0);
  return list;
}

describe('dedup membership filters', () => {
  it('ids of slots written without filters (before they existed) are still found', async () => {
    const b = base();
    const old = ids('old', 60);
    await promote(b, S - 1, old, 0);
    expect(await meta(b, S - 1)).not.toHaveProperty('f');
    const fresh = ids('new', 60);
    await promote(b, S, fresh, BITS);
    expect((await meta(b, S)).f).toBe(BITS * PER);
    expect(await reserve(b, S, [...old, ...fresh])).toEqual(Array(120).fill('d'));
    expect(await reserve(b, S, ids('other', 30))).toEqual(Array(30).fill(0));
  });

  it('an id a writer without filters appends to a filtered slot is found: the slot stops using its filters', async () => {
    const b = base();
    const list = await filteredSlot(b);
    // An id whose bits are set in none of the slot's epochs (nor the next), so that a lookup that
    // trusted the filters would miss it.
    const { e0, l } = await meta(b, S);
    let late = '';
    for (let k = 0; !late; k++) {
      const c = `late-${k}`;
      let hit = false;
      for (let e = e0!; e <= l! + 1; e++) hit ||= await inFilter(b, S, e, c);
      if (!hit) late = c;
    }
    await promote(b, S, [late], 0);
    const m = await meta(b, S);
    expect(m.n).toBe(m.fn! + 1);
    expect(await reserve(b, S, [late])).toEqual(['d']);
    // A writer with filters does not make them usable again; everything is still found.
    await promote(b, S, ids('more', 10), BITS);
    const m2 = await meta(b, S);
    expect(m2.fn).toBe(m.fn);
    expect(m2.n).toBe(m.n! + 10);
    expect(await reserve(b, S, [late, ...list])).toEqual(Array(101).fill('d'));
    expect(await reserve(b, S, ids('other', 20))).toEqual(Array(20).fill(0));
  });

  it("a filter's false positive is not a duplicate: the bucket decides", async () => {
    const b = base();
    await filteredSlot(b);
    const { e0, l } = await meta(b, S);
    const ghost = 'ghost';
    // Set the ghost's bits in every epoch's filter, without its entry.
    for (let e = e0!; e <= l!; e++) {
      const size = (await meta(b, S)).f! * 2 ** e;
      const hex = fingerprint(ghost).dedup;
      await redis.setbit(`${b}:${S}:${e}:f`, Number.parseInt(hex.slice(0, 8), 16) % size, 1);
      await redis.setbit(`${b}:${S}:${e}:f`, Number.parseInt(hex.slice(8, 16), 16) % size, 1);
      expect(await inFilter(b, S, e, ghost)).toBe(true);
    }
    expect(await reserve(b, S, [ghost])).toEqual([0]);
    // The worker's checked promote stores it (it was not seen), and then it is a duplicate.
    await redis.del(`${b}:p:${fingerprint(ghost).dedup}`);
    expect(await promote(b, S, [ghost], BITS, 1)).toBe(1);
    expect(await reserve(b, S, [ghost])).toEqual(['d']);
  });

  it('a filtered slot holds the buckets a writer without filters leaves, every entry in its filter, each filter sized f·2^e and expiring with its slot', async () => {
    const withF = base();
    const without = base();
    const all: string[][] = [];
    // Calls of 1 to 300 ids over slots 100-102: epochs grow inside a call and between calls.
    for (const [slot, n] of [
      [100, 1],
      [100, 20],
      [100, 300],
      [101, 5],
      [101, 120],
      [102, 40],
    ] as const) {
      const list = ids(`s${slot}`, n);
      all.push(list);
      await promote(withF, slot, list, BITS);
      await promote(without, slot, list, 0);
    }
    const bucketsOf = async (b: string) => {
      const out: Record<string, string> = {};
      for (const k of await redis.keys(`${b}:*`))
        if (/:\d+:\d+:\d+$/.test(k)) out[k.slice(b.length)] = (await redis.getBuffer(k))!.toString('hex');
      return out;
    };
    expect(await bucketsOf(withF)).toEqual(await bucketsOf(without));
    const metas = new Map<number, Record<string, number>>();
    for (const slot of [100, 101, 102]) {
      const m = await meta(withF, slot);
      metas.set(slot, m);
      const plain = await meta(without, slot);
      expect({ e0: m.e0, l: m.l, n: m.n }).toEqual(plain);
      expect(m.fn).toBe(m.n);
      expect(m.fe).toBe(Math.max(1, m.e0!));
      for (let e = m.fe!; e <= m.l!; e++) {
        const key = `${withF}:${slot}:${e}:f`;
        expect(await redis.strlen(key)).toBe((m.f! * 2 ** e) / 8);
        // The TTL of the slot's buckets (every key of a slot is written with it).
        const ttl = await redis.pttl(key);
        expect(ttl).toBeGreaterThan(0);
        expect(ttl).toBeLessThanOrEqual(TTL);
        expect(Math.abs(ttl - (await redis.pttl(`${withF}:${slot}:m`)))).toBeLessThan(5_000);
      }
    }
    // Every id of a slot is in its epoch's filter (epochs below fe have none).
    for (const [slot, m] of metas) {
      const epochs = new Map<number, { filter: Buffer | null; size: number }>();
      for (let e = m.e0!; e <= m.l!; e++)
        epochs.set(e, { filter: await redis.getBuffer(`${withF}:${slot}:${e}:f`), size: m.f! * 2 ** e });
      const bit = (f: Buffer, i: number) => (f[Math.floor(i / 8)]! >> (7 - (i % 8))) & 1;
      for (const id of all.filter((x) => x[0]!.startsWith(`s${slot}`)).flat()) {
        const fp = fingerprint(id);
        let found = 0;
        for (const [e, { filter, size }] of epochs) {
          const v = await redis.getBuffer(`${withF}:${slot}:${e}:${fp.bucket % 2 ** e}`);
          if (!v?.toString('hex').match(new RegExp(`^(.{16})*${fp.dedup}`))) continue;
          found++;
          if (e < m.fe!) continue;
          expect(filter, `${slot}:${e}`).not.toBeNull();
          const a = Number.parseInt(fp.dedup.slice(0, 8), 16) % size;
          const c = Number.parseInt(fp.dedup.slice(8, 16), 16) % size;
          expect([bit(filter!, a), bit(filter!, c)], id).toEqual([1, 1]);
        }
        expect(found, id).toBe(1);
      }
    }
    // And the lookups agree: every id is a duplicate in both, a new one in neither.
    const flat = all.slice(3).flat();
    expect(await reserve(withF, 102, flat)).toEqual(await reserve(without, 102, flat));
    expect(await reserve(withF, 102, flat)).toEqual(Array(flat.length).fill('d'));
  });
});

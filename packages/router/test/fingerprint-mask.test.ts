import { afterAll, describe, expect, it } from 'vitest';
import { dedupFixture, PER, TTL, WORDS } from '../../../test/helpers/dedup-fixture.ts';
import { testEnv } from '../../../test/helpers/env.ts';
import { GROWING_CALLS } from '../../../test/helpers/fingerprint-calls.ts';
import { monitorRedis } from '../../../test/helpers/redis-monitor.ts';
import { waitFor } from '../../../test/helpers/wait.ts';
import { fingerprint } from '../src/records/fingerprints.ts';

/**
 * The window masks in front of the dedup buckets (packages/shared/src/lua/fingerprints.lua;
 * docs/storage.md, "Window masks") through the scripts that use them, dedup-promote-1 and
 * dedup-reserve-1, on a real Redis. A mask may only ever save a bucket read: an id whose slot was
 * written without masks, or by a writer without them after the mask existed, or whose slot's bit a
 * slot 32 later took over, is still found, and a false positive is never a duplicate.
 */
const { redis, r, args, base, ids, promote, meta, close, ...f } = dedupFixture('ff');
afterAll(close);
const reserve = (b: string, slot: number, list: string[], back = 1) => f.reserve(b, slot, list, back);
const S = 1000;

/** The table and the two bit offsets of `id` for `slot` (its meta's `w`). */
async function maskBits(
  b: string,
  slot: number,
  id: string,
): Promise<{ key: string; offs: [number, number] }> {
  const [g, words] = (await meta(b, slot)).w!.split(':').map(Number) as [number, number];
  const hex = fingerprint(id).dedup;
  const off = (x: number) => 32 * (x % words) + 31 - (slot % 32);
  return {
    key: `${b}:w:${g}`,
    offs: [off(Number.parseInt(hex.slice(0, 8), 16)), off(Number.parseInt(hex.slice(8, 16), 16))],
  };
}

/** Whether the mask has `slot`'s bit in both of `id`'s words. */
async function inMask(b: string, slot: number, id: string): Promise<boolean> {
  const { key, offs } = await maskBits(b, slot, id);
  return (await redis.getbit(key, offs[0])) === 1 && (await redis.getbit(key, offs[1])) === 1;
}

/** A slot `S` in the mask (the slot before sized it) with 100 ids in it. */
async function maskedSlot(b: string): Promise<string[]> {
  await promote(b, S - 1, ids('prev', 50), WORDS);
  const list = ids('in', 100);
  await promote(b, S, list, WORDS);
  const m = await meta(b, S);
  expect(m.w).toMatch(/^\d+:\d+$/);
  expect(m.fn).toBe(m.n);
  return list;
}

describe('dedup window masks', () => {
  it('ids of slots written without masks (before they existed) are still found', async () => {
    const b = base();
    const old = ids('old', 60);
    await promote(b, S - 1, old, 0);
    expect(await meta(b, S - 1)).not.toHaveProperty('w');
    const fresh = ids('new', 60);
    await promote(b, S, fresh, WORDS);
    expect((await meta(b, S)).w).toBeDefined();
    expect(await reserve(b, S, [...old, ...fresh])).toEqual(Array(120).fill('d'));
    expect(await reserve(b, S, ids('other', 30))).toEqual(Array(30).fill(0));
  });

  it('an id a writer without masks appends to a masked slot is found: the slot stops using its bit', async () => {
    const b = base();
    const list = await maskedSlot(b);
    // An id the mask does not have, so that a lookup that trusted the mask would miss it.
    let late = '';
    for (let k = 0; !late; k++) if (!(await inMask(b, S, `late-${k}`))) late = `late-${k}`;
    const m = await meta(b, S);
    await promote(b, S, [late], 0);
    const m1 = await meta(b, S);
    expect(Number(m1.n)).toBe(Number(m.n) + 1);
    expect(m1.fn).toBe(m.fn);
    expect(await inMask(b, S, late)).toBe(false);
    expect(await reserve(b, S, [late])).toEqual(['d']);
    // A writer with masks does not make the bit usable again; everything is still found.
    await promote(b, S, ids('more', 10), WORDS);
    expect((await meta(b, S)).fn).toBe(m.fn);
    expect(await reserve(b, S, [late, ...list])).toEqual(Array(101).fill('d'));
    expect(await reserve(b, S, ids('other', 20))).toEqual(Array(20).fill(0));
  });

  it("a mask's false positive is not a duplicate: the bucket decides", async () => {
    const b = base();
    await maskedSlot(b);
    const ghost = 'ghost';
    const { key, offs } = await maskBits(b, S, ghost);
    for (const o of offs) await redis.setbit(key, o, 1);
    expect(await inMask(b, S, ghost)).toBe(true);
    expect(await reserve(b, S, [ghost])).toEqual([0]);
    // The worker's checked promote stores it (it was not seen), and then it is a duplicate.
    await redis.del(`${b}:p:${fingerprint(ghost).dedup}`);
    expect(await promote(b, S, [ghost], WORDS, 1)).toBe(1);
    expect(await reserve(b, S, [ghost])).toEqual(['d']);
  });

  it('a new table never takes the name of a live one (its pointer gone first)', async () => {
    const b = base();
    await promote(b, S - 1, ids('prev', 5), WORDS);
    const list = ids('in', 40);
    await promote(b, S, list, WORDS);
    const g = (await meta(b, S)).w!.split(':')[0];
    const before = await redis.getBuffer(`${b}:w:${g}`);
    await redis.del(`${b}:w`);
    await promote(b, S + 1, ids('next', 30), WORDS);
    expect((await meta(b, S + 1)).w!.split(':')[0]).not.toBe(g);
    expect(await redis.getBuffer(`${b}:w:${g}`)).toEqual(before);
    expect(await reserve(b, S + 1, list)).toEqual(Array(list.length).fill('d'));
  });

  it('a slot 32 later takes over the bit: its own ids only; a window of more than 32 slots reads the older ones bucket by bucket', async () => {
    const b = base();
    const slots = new Map<number, string[]>();
    for (let s = S - 40; s <= S; s++) {
      const list = ids(`s${s}`, 20);
      slots.set(s, list);
      await promote(b, s, list, WORDS);
    }
    // One table from S-39 on (S-40, the tenant's first slot, has none).
    const w = (await meta(b, S)).w;
    expect((await meta(b, S - 39)).w).toBe(w);
    expect(await meta(b, S - 40)).not.toHaveProperty('w');
    // Slot S-39's bit now belongs to S-7: the words set for that bit are exactly S-7's ids'.
    const [g, words] = w!.split(':').map(Number) as [number, number];
    const table = (await redis.getBuffer(`${b}:w:${g}`))!;
    expect(table.length).toBe(4 * words);
    const plane = (S - 7) % 32;
    const set = new Set<number>();
    for (let i = 0; i < words; i++) if ((table.readUInt32BE(4 * i) >>> plane) & 1) set.add(i);
    const want = new Set<number>();
    for (const id of slots.get(S - 7)!) {
      const hex = fingerprint(id).dedup;
      want.add(Number.parseInt(hex.slice(0, 8), 16) % words);
      want.add(Number.parseInt(hex.slice(8, 16), 16) % words);
    }
    expect(set).toEqual(want);
    // A 41-slot window: the slots the mask cannot vouch for (32 and more back) are still found.
    const all = [...slots.values()].flat();
    expect(await reserve(b, S, all, 40)).toEqual(Array(all.length).fill('d'));
    expect(await reserve(b, S, ids('other', 20), 40)).toEqual(Array(20).fill(0));
  });

  it('a masked slot holds the buckets a writer without masks leaves, every entry in the mask, which expires with its slots', async () => {
    const withM = base();
    const without = base();
    const all = new Map<number, string[]>();
    // The tenant's first slot (99) gets no mask (its epoch filter: fingerprint-filter.test.ts).
    // Then calls of 1 to 300 ids over slots 100-102: epochs grow inside a call and between calls.
    await promote(withM, 99, ['first'], WORDS);
    await promote(without, 99, ['first'], 0);
    expect(await meta(withM, 99)).not.toHaveProperty('w');
    const { fb: _fb, gn: _gn, ...first } = await meta(withM, 99);
    expect(first).toEqual(await meta(without, 99));
    for (const [slot, n] of GROWING_CALLS) {
      const list = ids(`s${slot}`, n);
      all.set(slot, [...(all.get(slot) ?? []), ...list]);
      await promote(withM, slot, list, WORDS);
      await promote(without, slot, list, 0);
    }
    // Every bucket of slots 99-102, by name from the slot metas (no KEYS over a shared Redis).
    const bucketsOf = async (b: string) => {
      const out: Record<string, string | undefined> = {};
      for (const slot of [99, 100, 101, 102]) {
        const m = await meta(b, slot);
        const pipe = redis.pipeline();
        const names: string[] = [];
        for (let e = Number(m.e0); e <= Number(m.l); e++)
          for (let k = 0; k < 2 ** e; k++) {
            names.push(`:${slot}:${e}:${k}`);
            pipe.getBuffer(`${b}:${slot}:${e}:${k}`);
          }
        const res = (await pipe.exec()) ?? [];
        names.forEach((n, i) => {
          out[n] = (res[i]?.[1] as Buffer | null)?.toString('hex');
        });
      }
      return out;
    };
    expect(await bucketsOf(withM)).toEqual(await bucketsOf(without));
    for (const [slot, list] of all) {
      const m = await meta(withM, slot);
      const plain = await meta(without, slot);
      // (`c`, the compaction cursor the slot after it keeps, depends on the calls: not compared.)
      expect({ e0: m.e0, l: m.l, n: m.n }).toEqual({ e0: plain.e0, l: plain.l, n: plain.n });
      expect(m.fn).toBe(m.n);
      const { key } = await maskBits(withM, slot, list[0]!);
      for (const k of [key, `${withM}:w`]) {
        const ttl = await redis.pttl(k);
        expect(ttl).toBeGreaterThan(0);
        expect(ttl).toBeLessThanOrEqual(TTL);
      }
      for (const id of list) expect(await inMask(withM, slot, id), id).toBe(true);
    }
    // A slot that outgrew its table's size made the next slot start a new table.
    expect((await meta(withM, 101)).w).not.toBe((await meta(withM, 100)).w);
    // And the lookups agree: every id is a duplicate in both, a new one in neither.
    const flat = [...all.get(101)!, ...all.get(102)!];
    expect(await reserve(withM, 102, flat)).toEqual(await reserve(without, 102, flat));
    expect(await reserve(withM, 102, flat)).toEqual(Array(flat.length).fill('d'));
  });
});

describe("a window's slot metas, read by halving", () => {
  it('finds every id of a sparse window (slots here and there, the live one empty or not), and no other', async () => {
    for (const present of [
      [0, 1, 5, 6, 13, 24],
      [3, 4, 23],
      [24],
      [0],
      [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24],
    ]) {
      const b = base();
      const all: string[] = [];
      for (const back of present) {
        const list = ids(`s${back}`, 5);
        all.push(...list);
        await promote(b, S - back, list, WORDS);
      }
      expect(await reserve(b, S, all, 24), String(present)).toEqual(Array(all.length).fill('d'));
      expect(await reserve(b, S, ids('other', 10), 24)).toEqual(Array(10).fill(0));
      // A window one slot shorter does not reach the oldest.
      if (present.includes(24)) {
        const old = all.slice(all.length - 5);
        await redis.del(...old.map((id) => `${b}:p:${fingerprint(id).dedup}`));
        expect(await reserve(b, S, old, 23)).toEqual(Array(5).fill(0));
      }
    }
  });

  it("a young tenant's reserve reads its live slot's meta, not the 24 empty ones before it", async () => {
    const b = base();
    await promote(b, S, ids('in', 20), WORDS);
    // The commands that name this tenant's keys (MONITOR shows a script's own calls), so other
    // tests on the same Redis do not count; a GET of a sentinel key marks the end.
    const seen: string[] = [];
    const sentinel = `${b}:end`;
    const monitor = await monitorRedis(testEnv().SPILLWAY_REDIS_URL!, (a) => {
      if (a[1]?.startsWith(`"${b}:`)) seen.push(a[0] === '"get"' && a[1] === `"${sentinel}"` ? 'end' : a[0]!);
    });
    try {
      expect(await reserve(b, S, ids('new', 1), 24)).toEqual([0]);
      await redis.get(sentinel);
      await waitFor(() => seen.includes('end'), 'the monitor to see the reserve');
      expect(seen.filter((c) => c === '"hmget"')).toHaveLength(1);
      expect(seen.filter((c) => c === '"exists"')).toHaveLength(1);
    } finally {
      monitor.stop();
    }
  });
});

describe("the worker's checked promote", () => {
  it('looks nothing up for ids whose intake promoted them a moment ago (marker "d")', async () => {
    const b = base();
    const list = ids('done', 20);
    // The intake's promote, markers kept ("d" for a minute).
    expect(await r.dedupPromote(b, TTL, S, 0, PER, 0, WORDS, ...args(list))).toBe(20);
    // A slot meta no lookup can read: a checked promote that looked anything up would fail.
    await redis.del(`${b}:${S}:m`);
    await redis.set(`${b}:${S}:m`, 'unreadable');
    expect(await r.dedupPromote(b, TTL, S, 0, PER, 1, WORDS, ...args(list))).toBe(0);
    // An id whose intake promote was lost (its marker still pending) is looked up: the same call
    // with it reaches the unreadable meta.
    const lost = 'lost-promote';
    await redis.set(`${b}:p:${fingerprint(lost).dedup}`, 'p:intake', 'PX', TTL);
    await expect(r.dedupPromote(b, TTL, S, 0, PER, 1, WORDS, ...args([...list, lost]))).rejects.toThrow(
      /WRONGTYPE/,
    );
  });

  it('stores an id whose intake promote was lost, once', async () => {
    const b = base();
    const list = ids('kept', 10);
    expect(await r.dedupPromote(b, TTL, S, 0, PER, 0, WORDS, ...args(list))).toBe(10);
    const lost = ids('lost', 3);
    for (const id of lost) await redis.set(`${b}:p:${fingerprint(id).dedup}`, 'p:intake', 'PX', TTL);
    expect(await r.dedupPromote(b, TTL, S, 0, PER, 1, WORDS, ...args([...list, ...lost, lost[0]!]))).toBe(3);
    expect(await reserve(b, S, [...list, ...lost], 0)).toEqual(Array(13).fill('d'));
    // Markers gone (a minute later): the buckets answer, and a second checked promote adds nothing.
    await redis.del(...[...list, ...lost].map((id) => `${b}:p:${fingerprint(id).dedup}`));
    expect(await r.dedupPromote(b, TTL, S, 0, PER, 1, WORDS, ...args([...list, ...lost]))).toBe(0);
    expect(await reserve(b, S, [...list, ...lost], 0)).toEqual(Array(13).fill('d'));
  });
});

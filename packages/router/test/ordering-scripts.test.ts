import { randomBytes } from 'node:crypto';
import { ordStepArgs } from '@spillway/router/testing';
import { createKeys, defineCommands } from '@spillway/shared';
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { testEnv } from '../../../test/helpers/env.ts';

/**
 * The ordered store's Lua scripts on a real Redis, step by step (packages/router/src/ordering/
 * store.ts drives them; docs/architecture.md "Ordered delivery per key"): the fan-out watermark,
 * one lease at a time, finished numbers never coming back, a lost lease refused.
 */
interface OrdCommands {
  ordAccept(n: number, ...a: (string | number)[]): Promise<number>;
  ordFanout(n: number, ...a: (string | number)[]): Promise<number>;
  ordStep(...a: (string | number)[]): Promise<(string | number)[]>;
}

const redis = defineCommands<OrdCommands>(
  new Redis(testEnv().SPILLWAY_REDIS_URL!),
  new URL('../src/commands/', import.meta.url),
  ['ord-accept-2n', 'ord-fanout-2n', 'ord-step-5'],
);
afterAll(() => redis.disconnect());

const TTL = 60_000;

function fixture() {
  const keys = createKeys(`ord-${randomBytes(4).toString('hex')}`);
  const T = 'acme';
  const K = 'order-1';
  const E = 'ep1';
  const member = `${E}\n${K}`;
  const wire = (id: string, attempt = 1) => JSON.stringify({ id, attempt });
  const accept = (...ids: string[]) =>
    redis.ordAccept(
      ids.length * 2,
      ...ids.flatMap((id) => [keys.orderEvent(T, id), keys.orderKey(T, K)]),
      TTL,
      TTL,
    );
  const fanout = (id: string, endpoints: string[] = [E], mode = 'event') =>
    redis.ordFanout(
      4 + endpoints.length * 2,
      keys.orderEvent(T, id),
      keys.orderKey(T, K),
      keys.orderWaiting(T, K),
      keys.orderDue(T),
      ...endpoints.flatMap((e) => [keys.orderEndpoint(T, e, K), keys.orderPending(T, e, K)]),
      mode,
      Date.now(),
      TTL,
      K,
      TTL,
      ...endpoints.flatMap((e) => [e, wire(id)]),
    );
  const step = (op: string, token: string, extra: (string | number)[] = [], leaseMs = 5000) =>
    redis.ordStep(...ordStepArgs(keys, T, E, K, op, token, leaseMs, extra));
  const due = () => redis.zrange(keys.orderDue(T), 0, -1);
  return { accept, fanout, step, due, wire };
}

describe('ordered store scripts', () => {
  it('acceptance numbers each event once; a later event fanned out first waits for the earlier one', async () => {
    const f = fixture();
    await f.accept('e1', 'e2');
    await f.accept('e1'); // a second promote changes nothing
    // e2's job is fanned out before e1's: e2 must not go first.
    expect(await f.fanout('e2')).toBe(2);
    expect(await f.step('lease', 'w1')).toEqual(['waiting']);
    expect(await f.due()).toEqual([]); // the fan-out of e1 will wake it, not a poller
    expect(await f.fanout('e1')).toBe(1);
    expect(await f.due()).toEqual(['ep1\norder-1']);
    const leased = await f.step('lease', 'w1');
    expect(leased.slice(0, 3)).toEqual(['leased', 1, f.wire('e1')]);
    // One lease at a time: another worker is told it is busy.
    expect((await f.step('lease', 'w2'))[0]).toBe('busy');
    // Done: the next is leased to the same worker at once.
    expect((await f.step('done', 'w1', [1])).slice(0, 3)).toEqual(['leased', 2, f.wire('e2')]);
    // A step on a lease one does not hold changes nothing.
    expect(await f.step('done', 'w1', [1])).toEqual(['stale']);
    expect(await f.step('done', 'w2', [2])).toEqual(['stale']);
    expect((await f.step('done', 'w1', [2]))[0]).toBe('idle');
    // A re-run job brings e1 again: it was finished, so it is not delivered again.
    await f.fanout('e1');
    expect(await f.step('lease', 'w1')).toEqual(['idle']);
  });

  it('a retry waits in the store holding the key; an expired lease goes to another worker and the old holder is refused', async () => {
    const f = fixture();
    await f.accept('a', 'b');
    await f.fanout('a');
    await f.fanout('b');
    expect((await f.step('lease', 'w1'))[1]).toBe(1);
    expect((await f.step('backoff', 'w1', [1, 300, f.wire('a', 2)]))[0]).toBe('later');
    // Nothing behind it starts while it waits.
    expect((await f.step('lease', 'w2'))[0]).toBe('later');
    await new Promise((r) => setTimeout(r, 320));
    const again = await f.step('lease', 'w2', [], 50);
    expect(again.slice(0, 3)).toEqual(['leased', 1, f.wire('a', 2)]);
    // w2 dies holding it: after its lease w3 gets the same event, and w2's late done is refused.
    await new Promise((r) => setTimeout(r, 60));
    expect((await f.step('lease', 'w3')).slice(0, 2)).toEqual(['leased', 1]);
    expect(await f.step('done', 'w2', [1])).toEqual(['stale']);
    expect((await f.step('done', 'w3', [1])).slice(0, 2)).toEqual(['leased', 2]);
  });

  it('tail mode gives a task a new number after the ones accepted so far (a replay joins the end of its key)', async () => {
    const f = fixture();
    await f.accept('x', 'y');
    await f.fanout('x');
    expect(await f.fanout('x', undefined, 'tail')).toBe(3); // x replayed: after y
    expect((await f.step('lease', 'w1'))[1]).toBe(1);
    await f.step('done', 'w1', [1]); // number 2 (y) is not fanned out yet: the replay waits
    expect(await f.step('lease', 'w1')).toEqual(['waiting']);
    await f.fanout('y');
    expect((await f.step('lease', 'w1')).slice(0, 3)).toEqual(['leased', 2, f.wire('y')]);
    expect((await f.step('done', 'w1', [2])).slice(0, 3)).toEqual(['leased', 3, f.wire('x')]);
  });
});

import type { IncomingMessage } from 'node:http';
import { ConfigStore, createRouterServices } from '@spillway/router';
import { afterEach, describe, expect, it } from 'vitest';
import {
  createSpillTopic,
  makeEndpoint,
  makeEvent,
  makeTenant,
  routerHarness,
  startReceiver,
  workerProcessFixture,
} from '../helpers/router-fixtures.ts';
import { sleep, waitFor } from '../helpers/wait.ts';

/**
 * Ordered delivery per key end to end (workers, Redis, Kafka, a real receiver): events that share
 * an orderingKey reach an endpoint with `ordering: "per-key"` one at a time, in acceptance order,
 * through retries, several workers, a pause, the DLQ and its replay, and a worker process killed.
 */
type RouterHarness = Awaited<ReturnType<typeof routerHarness>>;
const cleanup: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c().catch(() => {});
});

/** Event ids are `<key>.<index>`; index = acceptance order within the key. */
const idOf = (key: string, i: number) => `${key}.${i}`;
const parse = (id: string) => {
  const dot = id.lastIndexOf('.');
  return { key: id.slice(0, dot), i: Number(id.slice(dot + 1)) };
};

/** What an ordered receiver saw: every request per key in arrival order, and its concurrency per key. */
interface OrderLog {
  /** key → indices of every request (2xx or not), in arrival order. */
  arrivals: Map<string, number[]>;
  /** key → indices answered 2xx. */
  delivered: Map<string, Set<number>>;
  /** key → most requests of it open at once. */
  maxOpen: Map<string, number>;
}

function orderReceiver(
  s: RouterHarness,
  answer: (key: string, i: number, req: IncomingMessage) => number,
  delay: () => number = () => 0,
) {
  const log: OrderLog = { arrivals: new Map(), delivered: new Map(), maxOpen: new Map() };
  const open = new Map<string, number>();
  const r = s.receiver((req) => {
    const { key, i } = parse(String(req.headers['webhook-id']));
    const n = (open.get(key) ?? 0) + 1;
    open.set(key, n);
    log.maxOpen.set(key, Math.max(log.maxOpen.get(key) ?? 0, n));
    log.arrivals.set(key, [...(log.arrivals.get(key) ?? []), i]);
    const status = answer(key, i, req);
    if (status === 200) {
      const d = log.delivered.get(key) ?? new Set();
      d.add(i);
      log.delivered.set(key, d);
    }
    // The key's slot frees when the answer is written, not on a timer of its own (a timer racing
    // the answer counted a request still open after the worker had its answer).
    return { status, delayMs: delay(), answering: () => open.set(key, (open.get(key) ?? 1) - 1) };
  });
  return { r, log };
}

/** Every key's arrivals never go back: a repeat is of the event just sent, never an earlier one after a later. */
function expectInOrder(log: OrderLog, only?: readonly string[]): void {
  for (const [key, seq] of log.arrivals) {
    if (only && !only.includes(key)) continue;
    for (let j = 1; j < seq.length; j++)
      if (seq[j]! < seq[j - 1]!) throw new Error(`key ${key} out of order: ${seq.join(',')}`);
  }
}

/** Submits `perKey` events for each key, each key's in sequence (a 202 before the next), keys in parallel. */
async function submitKeyed(s: RouterHarness, tenantId: string, keys: string[], perKey: number, from = 0) {
  await Promise.all(
    keys.map(async (key) => {
      for (let i = from; i < from + perKey; i++)
        await s.services.intake.submit({ ...makeEvent(tenantId, idOf(key, i)), orderingKey: key });
    }),
  );
}

describe('ordered delivery per key', () => {
  it('one at a time per key, in acceptance order, through random failures and retries on two workers; other keys, endpoints and unkeyed events do not wait', async () => {
    const s = await routerHarness(cleanup);
    let failing = true;
    const ordered = await orderReceiver(
      s,
      () => (failing && Math.random() < 0.3 ? 500 : 200),
      () => Math.floor(Math.random() * 10),
    );
    const rx = await ordered.r;
    const plain = await s.receiver();
    const t = await makeTenant(s.store, { concurrency: 32, maxInFlight: 1000 });
    await makeEndpoint(s.store, t.id, rx.url, {
      ordering: 'per-key',
      retry: { schedule: ['50ms'], maxAttempts: 30 },
    });
    await makeEndpoint(s.store, t.id, plain.url);
    await s.worker();
    await s.worker(s.runtime());
    const keys = Array.from({ length: 30 }, (_, k) => `k${k}`);
    // Unkeyed events beside them go out unordered, at once.
    await Promise.all(
      Array.from({ length: 20 }, (_, i) => s.services.intake.submit(makeEvent(t.id, `free.${i}`))),
    );
    await submitKeyed(s, t.id, keys, 10);
    await waitFor(
      () => keys.every((k) => ordered.log.delivered.get(k)?.size === 10),
      'every keyed event delivered to the ordered endpoint',
      60_000,
    );
    failing = false;
    expectInOrder(ordered.log, keys);
    expect(Math.max(...keys.map((k) => ordered.log.maxOpen.get(k)!))).toBe(1);
    // Unkeyed events to the same endpoint were not held one at a time.
    expect(ordered.log.maxOpen.get('free')).toBeGreaterThan(1);
    // The random failures did make retries (a test that never retried would prove little).
    const attempts = [...ordered.log.arrivals.values()].reduce((n, a) => n + a.length, 0);
    expect(attempts).toBeGreaterThan(300);
    // The unordered endpoint got everything, keyed or not.
    await waitFor(() => plain.got.size === 320, 'the plain endpoint got all 320');
    await waitFor(() => ordered.log.delivered.get('free')?.size === 20, 'unkeyed events, unordered');
  });

  it('a dead-lettered head is skipped (the key moves on); a replay joins the tail of its key', async () => {
    const s = await routerHarness(cleanup);
    let broken = true;
    const ordered = orderReceiver(s, (key, i) => (broken && key === 'acct-1' && i === 2 ? 422 : 200));
    const rx = await ordered.r;
    const t = await makeTenant(s.store);
    await makeEndpoint(s.store, t.id, rx.url, {
      ordering: 'per-key',
      retry: { schedule: ['50ms'], maxAttempts: 2 },
    });
    await s.worker();
    await submitKeyed(s, t.id, ['acct-1', 'acct-2'], 6);
    await waitFor(() => ordered.log.delivered.get('acct-1')?.size === 5, 'acct-1 past its dead head');
    await waitFor(() => ordered.log.delivered.get('acct-2')?.size === 6, 'acct-2 untouched');
    expect(ordered.log.arrivals.get('acct-1')).toEqual([0, 1, 2, 2, 3, 4, 5]);
    const dlq = await s.services.listDlq(t.id);
    expect(dlq).toMatchObject([{ eventId: 'acct-1.2', attempts: 2, lastError: 'http_422' }]);
    broken = false;
    await submitKeyed(s, t.id, ['acct-1'], 1, 6);
    await waitFor(() => ordered.log.delivered.get('acct-1')?.has(6), 'acct-1.6');
    expect(await s.services.replayDlq(t.id)).toBe(1);
    await submitKeyed(s, t.id, ['acct-1'], 1, 7);
    await waitFor(() => ordered.log.delivered.get('acct-1')?.size === 8, 'the replayed head and acct-1.7');
    // The replay went in at the tail of its key, before the event accepted after it.
    expect(ordered.log.arrivals.get('acct-1')).toEqual([0, 1, 2, 2, 3, 4, 5, 6, 2, 7]);
  });

  it('a paused endpoint holds its keys; resumed, each key continues in order', async () => {
    const s = await routerHarness(cleanup);
    const ordered = orderReceiver(
      s,
      () => 200,
      () => 2,
    );
    const rx = await ordered.r;
    const t = await makeTenant(s.store);
    const ep = await makeEndpoint(s.store, t.id, rx.url, { ordering: 'per-key' });
    await s.worker();
    await submitKeyed(s, t.id, ['a', 'b', 'c'], 3);
    await waitFor(
      () => ['a', 'b', 'c'].every((k) => ordered.log.delivered.get(k)?.size === 3),
      'first round',
    );
    await s.store.updateEndpoint(t.id, ep.id, (e) => ({ ...e, status: 'paused' }));
    await sleep(1200);
    await submitKeyed(s, t.id, ['a', 'b', 'c'], 4, 3);
    await sleep(1500); // deliberate: nothing goes out while paused
    expect(['a', 'b', 'c'].map((k) => ordered.log.arrivals.get(k)!.length)).toEqual([3, 3, 3]);
    await s.store.updateEndpoint(t.id, ep.id, (e) => ({ ...e, status: 'active' }));
    await waitFor(
      () => ['a', 'b', 'c'].every((k) => ordered.log.delivered.get(k)?.size === 7),
      'after resume',
    );
    expectInOrder(ordered.log);
    for (const k of ['a', 'b', 'c']) expect(ordered.log.arrivals.get(k)).toEqual([0, 1, 2, 3, 4, 5, 6]);
  });
});

/**
 * Ordered delivery per key across worker processes and a crash: 3 `spillway start --role worker`
 * processes, 200 keys × 10 events, the receiver failing a fifth of the requests at random (so
 * every key goes through retries), and one worker SIGKILLed mid-run while it holds leases. Every
 * key's requests must arrive in acceptance order — an event may arrive again (the killed worker's
 * last attempt, or a retry), never after a later one — and every event must be delivered.
 */
describe('ordered delivery per key: 3 workers, 200 keys, random failures, a worker killed', () => {
  const { rt, startWorker } = workerProcessFixture();

  it('every key in order, every event delivered', { timeout: 240_000 }, async () => {
    await createSpillTopic(rt);
    const store = new ConfigStore(rt.redis, rt.keys, rt.secrets);
    const services = createRouterServices(rt);
    const KEYS = 200;
    const PER_KEY = 10;
    const arrivals = new Map<string, number[]>();
    const delivered = new Map<string, Set<number>>();
    let requests = 0;
    const r = await startReceiver((req) => {
      requests++;
      const id = String(req.headers['webhook-id']);
      const dot = id.lastIndexOf('.');
      const key = id.slice(0, dot);
      const i = Number(id.slice(dot + 1));
      arrivals.set(key, [...(arrivals.get(key) ?? []), i]);
      const status = Math.random() < 0.2 ? 500 : 200;
      if (status === 200) {
        const d = delivered.get(key) ?? new Set<number>();
        d.add(i);
        delivered.set(key, d);
      }
      // Slower than the events come in: every key has one on the wire or waiting most of the time.
      return { status, delayMs: 20 + Math.floor(Math.random() * 40) };
    });
    try {
      const t = await makeTenant(store, { maxInFlight: 2000, concurrency: 64 });
      const ep = await makeEndpoint(store, t.id, r.url, {
        ordering: 'per-key',
        timeoutMs: 2000,
        retry: { schedule: ['50ms', '100ms'], maxAttempts: 100 },
      });
      const workers = [await startWorker(), await startWorker(), await startWorker()];

      const keys = Array.from({ length: KEYS }, (_, k) => `key${k}`);
      const total = () => [...delivered.values()].reduce((n, d) => n + d.size, 0);
      // Each key's events in sequence (a 202 before the next: that is acceptance order), keys in parallel.
      const submitting = Promise.all(
        keys.map(async (key) => {
          for (let i = 0; i < PER_KEY; i++)
            await services.intake.submit({ ...makeEvent(t.id, `${key}.${i}`), orderingKey: key });
        }),
      );
      await waitFor(() => total() >= (KEYS * PER_KEY) / 3, 'a third delivered', 120_000);
      // Mid-run: a worker holding leases (and requests on the wire) dies.
      const victim = workers[1]!;
      // The (endpoint, key) state hashes hold the leases (token = the worker's id, with its pid).
      const stateKeys = keys.map((k) => rt.keys.orderEndpoint(t.id, ep.id, k));
      const leasesOf = async (pid: number) => {
        const p = rt.redis.pipeline();
        for (const k of stateKeys) p.hmget(k, 'lt', 'lu');
        const res = (await p.exec()) ?? [];
        return res.filter(([, v]) => {
          const [lt, lu] = v as [string | null, string | null];
          return lt?.includes(`-${pid}-`) && Number(lu) > Date.now();
        }).length;
      };
      // Sampled until it holds some: at one instant a fast worker may be between leases.
      let held = 0;
      await waitFor(
        async () => {
          held = await leasesOf(victim.child.pid!);
          return held > 0;
        },
        'the victim holding leases',
        30_000,
        20,
      ).catch(() => {});
      expect(held).toBeGreaterThan(0);
      victim.child.kill('SIGKILL');
      await victim.exited;
      const atKill = total();
      await submitting;
      await waitFor(() => total() === KEYS * PER_KEY, 'every event delivered', 180_000, 200);

      for (const [key, seq] of arrivals)
        for (let j = 1; j < seq.length; j++)
          expect(seq[j]!, `key ${key}: ${seq.join(',')}`).toBeGreaterThanOrEqual(seq[j - 1]!);
      for (const key of keys)
        expect([...delivered.get(key)!].sort((a, b) => a - b)).toEqual([...Array(PER_KEY).keys()]);
      const repeats = requests - KEYS * PER_KEY;
      console.log(
        `ordered kill: ${KEYS * PER_KEY} events, ${requests} requests (${repeats} repeats: retries and the killed worker's), ${atKill} delivered at the kill, the killed worker held ${held} leases`,
      );
      expect(requests).toBeGreaterThan(KEYS * PER_KEY); // the failures made retries
      for (const w of workers) if (w.child.exitCode === null) w.child.kill('SIGTERM');
      await Promise.all(workers.map((w) => w.exited));
    } finally {
      await services.close();
      await r.close();
    }
  });
});

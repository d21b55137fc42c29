import { FETCH_AHEAD, FetchGate, GatedWorker } from '@spillway/router/testing';
import { createQueue, createRedis } from '@spillway/shared';
import type { Job } from 'bullmq';
import { afterEach, describe, expect, it } from 'vitest';
import { monitorRedis } from '../../../test/helpers/redis-monitor.ts';
import { routerRuntime } from '../../../test/helpers/router-fixtures.ts';
import { waitFor } from '../../../test/helpers/wait.ts';

const cleanup: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

/** Room as the worker sees it (Engine#room): closed until `open(k)` lets k more waiters through. */
function room() {
  const waiters: (() => void)[] = [];
  return {
    wait: () => new Promise<void>((r) => waiters.push(r)),
    open: (k = Number.POSITIVE_INFINITY) => {
      for (const w of waiters.splice(0, k)) w();
    },
    get waiting() {
      return waiters.length;
    },
  };
}

async function setup(concurrency = 256) {
  const rt = routerRuntime();
  const queue = createQueue(rt.redis, rt.keys, rt.keys.intakeQueue, rt.logger);
  const conn = createRedis(rt.config.redis, { maxRetriesPerRequest: null });
  const gate = new FetchGate();
  const r = room();
  const ran: string[] = [];
  const datas = new Map<string, unknown>();
  const worker = new GatedWorker(
    rt.keys.intakeQueue,
    async (job: Job<{ k: number; pad: string }>) => {
      datas.set(job.id!, job.data);
      await r.wait();
      gate.admitted(job);
      ran.push(job.id!);
    },
    { connection: conn as never, prefix: rt.keys.bullPrefix, concurrency },
    gate,
  );
  worker.on('error', () => {});
  let closed = false;
  const close = async () => {
    if (closed) return;
    closed = true;
    await worker.close();
    conn.disconnect();
  };
  cleanup.push(async () => {
    await close();
    await queue.close();
    await rt.close();
  });
  return { rt, queue, gate, room: r, ran, datas, worker, close };
}

describe('GatedWorker (fetch only what can get room soon)', () => {
  it(`holds FETCH_AHEAD (${FETCH_AHEAD}) jobs fetched without room; the rest stay waiting in Redis, untouched, and run once there is room`, async () => {
    const { queue, gate, room: r, ran, datas } = await setup();
    const jobs = 10 * FETCH_AHEAD;
    for (let k = 0; k < jobs; k++) await queue.add('batch', { k, pad: 'x'.repeat(200) }, { jobId: `j${k}` });
    await waitFor(async () => r.waiting === FETCH_AHEAD, 'the first jobs to wait for room', 10_000);
    // Give a loop without the gate every chance to fetch more (it would take all 40 at once).
    await new Promise((res) => setTimeout(res, 500));
    expect(r.waiting).toBe(FETCH_AHEAD);
    expect(gate.waiting).toBe(FETCH_AHEAD);
    const counts = await queue.getJobCounts('active', 'wait');
    expect(counts).toEqual({ active: FETCH_AHEAD, wait: jobs - FETCH_AHEAD });
    // Room for those waiting: the gate refills, and no further than one job per completion beyond
    // it (a completing job may fetch its successor while the gate is open, as BullMQ does).
    r.open(FETCH_AHEAD);
    await waitFor(async () => ran.length === FETCH_AHEAD, 'the waiting jobs to run', 10_000);
    await waitFor(async () => r.waiting >= FETCH_AHEAD, 'the gate to refill', 10_000);
    await new Promise((res) => setTimeout(res, 300));
    expect(r.waiting).toBeLessThanOrEqual(2 * FETCH_AHEAD);
    expect((await queue.getJobCounts('active')).active).toBe(r.waiting);
    expect(datas.size).toBe(r.waiting + FETCH_AHEAD);
    // Room for all: every job runs once, with its own data.
    const drain = setInterval(() => r.open(), 20);
    try {
      await waitFor(async () => ran.length === jobs, 'every job to run', 20_000);
    } finally {
      clearInterval(drain);
    }
    expect(new Set(ran).size).toBe(jobs);
    for (let k = 0; k < jobs; k++) expect(datas.get(`j${k}`)).toEqual({ k, pad: 'x'.repeat(200) });
    await waitFor(
      async () => (await queue.getJobCounts('completed')).completed === jobs,
      'completions',
      10_000,
    );
    expect(gate.waiting).toBe(0);
  });

  it('closes while its gate is shut: the jobs it holds end, the rest stay in the wait list for the next worker', async () => {
    const { queue, room: r, close } = await setup();
    for (let k = 0; k < 2 * FETCH_AHEAD; k++) await queue.add('batch', { k, pad: '' }, { jobId: `c${k}` });
    await waitFor(async () => r.waiting === FETCH_AHEAD, 'the first jobs to wait for room', 10_000);
    const closing = close();
    r.open();
    await closing;
    const counts = await queue.getJobCounts('active', 'wait', 'completed');
    expect(counts.active).toBe(0);
    expect((counts.completed ?? 0) + (counts.wait ?? 0)).toBe(2 * FETCH_AHEAD);
    expect(counts.completed).toBeGreaterThanOrEqual(FETCH_AHEAD);
  });

  it('at a calm rate wakes once per job: an empty fetch takes back the marker BullMQ re-adds, and no job added after it waits out the block timeout', async () => {
    const rt = routerRuntime();
    const queue = createQueue(rt.redis, rt.keys, rt.keys.intakeQueue, rt.logger);
    const conn = createRedis(rt.config.redis, { maxRetriesPerRequest: null });
    const ran: string[] = [];
    const gate = new FetchGate();
    const worker = new GatedWorker(
      rt.keys.intakeQueue,
      async (job: Job) => {
        gate.admitted(job);
        ran.push(job.id!);
      },
      // A block timeout far longer than the waits below: a lost wake-up shows as a job not run.
      { connection: conn as never, prefix: rt.keys.bullPrefix, concurrency: 256, drainDelay: 60 },
      gate,
    );
    worker.on('error', () => {});
    // Every command naming this queue's marker or wait list, as Redis saw them.
    const marker = `"${rt.keys.bullPrefix}:${rt.keys.intakeQueue}:marker"`;
    const wait = `"${rt.keys.bullPrefix}:${rt.keys.intakeQueue}:wait"`;
    let wakes = 0;
    let fetches = 0;
    const monitor = await monitorRedis(rt.config.redis.url, (args) => {
      if (args[0] === '"bzpopmin"' && args[1] === marker) wakes++;
      // BullMQ's moveToActive: 11 keys, the wait list first.
      if (args[0] === '"evalsha"' && args[2] === '"11"' && args[3] === wait) fetches++;
    });
    cleanup.push(async () => {
      monitor.stop();
      await worker.close();
      conn.disconnect();
      await queue.close();
      await rt.close();
    });
    await worker.waitUntilReady();
    await new Promise((res) => setTimeout(res, 300));
    const wakes0 = wakes;
    const fetches0 = fetches;
    const jobs = 20;
    for (let k = 0; k < jobs; k++) {
      await queue.add('batch', { k }, { jobId: `calm${k}` });
      await waitFor(async () => ran.length === k + 1, `job ${k} to run`, 10_000);
      // Its completion reached Redis, and the worker is blocked again.
      await waitFor(
        async () => (await queue.getJobCounts('completed')).completed === k + 1,
        `job ${k} to complete`,
        10_000,
      );
      await new Promise((res) => setTimeout(res, 30));
    }
    // One wake-up and one moveToActive per job. Before: two BZPOPMINs (one for the job, one for
    // the marker its fetch re-added) and three moveToActive calls (two of them empty) per job.
    expect(wakes - wakes0).toBeLessThanOrEqual(jobs + 2);
    expect(fetches - fetches0).toBeLessThanOrEqual(jobs + 2);
    // A burst right behind a settle: every job still runs without waiting out the 60 s block.
    for (let k = 0; k < 10; k++) await queue.add('batch', { k }, { jobId: `burst${k}` });
    await waitFor(async () => ran.length === jobs + 10, 'the burst to run', 10_000);
  });

  it('counts a job out once however often it is admitted (at room, on joining a rerun, at its end)', async () => {
    const gate = new FetchGate(2);
    const a = { id: 'a' } as Job;
    const b = { id: 'b' } as Job;
    gate.fetched(a);
    gate.fetched(b);
    expect(gate.isOpen()).toBe(false);
    const changed = gate.changed();
    gate.admitted(a);
    await changed;
    gate.admitted(a);
    expect(gate.waiting).toBe(1);
    expect(gate.isOpen()).toBe(true);
  });
});

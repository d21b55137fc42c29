import { afterEach, describe, expect, it } from 'vitest';
import { makeEndpoint, makeEvent, makeTenant, routerHarness } from '../helpers/router-fixtures.ts';
import { waitFor } from '../helpers/wait.ts';

const cleanup: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c().catch(() => {});
});

describe('several workers', () => {
  it('two workers share intake jobs and spill partitions; a third joins and leaves mid-stream; nothing is lost', {
    timeout: 120_000,
  }, async () => {
    const h = await routerHarness(cleanup);
    // One runtime per worker: separate connections, worker ids and Kafka group members, as separate processes would have.
    const [rt1, rt2] = [h.runtime(), h.runtime()];
    const { store, services } = h;
    const r = await h.receiver(() => ({ status: 200, delayMs: 10 }));
    const t = await makeTenant(store, { maxInFlight: 10, concurrency: 10 });
    await makeEndpoint(store, t.id, r.url);
    const w0 = await h.worker();
    const w1 = await h.worker(rt1);

    const ids = Array.from({ length: 1500 }, (_, i) => `w${i}`);
    const submit = async (from: number, to: number) => {
      for (let i = from; i < to; i += 100)
        await Promise.all(
          ids.slice(i, Math.min(i + 100, to)).map((id) => services.intake.submit(makeEvent(t.id, id))),
        );
    };
    await submit(0, 500);
    const w2 = await h.worker(rt2);
    await submit(500, 1000);
    await waitFor(() => r.got.size >= 700, 'progress with three workers', 60_000);
    // The third leaves gracefully mid-stream: its jobs finish or hand their tasks off first.
    await h.stopWorker(w2);
    await submit(1000, 1500);
    await waitFor(() => ids.every((id) => r.got.has(id)), 'every id delivered', 90_000, 100);

    // The receiver records an id when the request arrives and answers 10 ms later; a worker counts
    // the delivery once it has the answer: wait for the last ones on the wire to be counted.
    const counted = () => [w0, w1, w2].map((w) => w.engine.snapshot()[t.id]?.delivered ?? 0);
    await waitFor(() => counted().reduce((a, b) => a + b, 0) >= 1500, 'every delivery counted', 10_000).catch(
      () => {},
    );
    const delivered = counted();
    console.log(
      `delivered per worker: ${delivered.join(', ')}; duplicates ${[...r.got.values()].reduce((n, c) => n + c - 1, 0)}`,
    );
    // Both long-lived workers did part of the work.
    expect(delivered[0]).toBeGreaterThan(0);
    expect(delivered[1]).toBeGreaterThan(0);
    expect(delivered.reduce((a, b) => a + b, 0)).toBeGreaterThanOrEqual(1500);
    const stats = await waitFor(async () => {
      const st = await services.tenantStats(t.id, { detail: true });
      return st.workers?.length === 2 && st.credits.used === 0 ? st : undefined;
    }, 'stats from the two live workers');
    expect(stats!.delivered).toBeGreaterThan(0);
  });
});

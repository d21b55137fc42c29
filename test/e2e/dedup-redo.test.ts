/**
 * The worker's redo of the intake's dedup promote (docs/architecture.md, "Dedup (intake)", step
 * 3): a job its intake marked promoted skips it; an unmarked job (the intake's promote was lost) is
 * promoted at fan-out, so its ids are duplicates afterwards.
 */
import { eventToWire } from '@spillway/router/testing';
import { createQueue, JOB_OPTS } from '@spillway/shared';
import { afterEach, describe, expect, it } from 'vitest';
import { withCommands } from '../../packages/router/src/commands/index.ts';
import { makeEndpoint, makeEvent, makeTenant, routerHarness } from '../helpers/router-fixtures.ts';
import { waitFor } from '../helpers/wait.ts';

const cleanup: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c().catch(() => {});
});

/** A harness, a receiver, a tenant with one endpoint on it, and the intake queue (no worker yet). */
async function tenantWithReceiver() {
  const s = await routerHarness(cleanup);
  const r = await s.receiver();
  const t = await makeTenant(s.store);
  await makeEndpoint(s.store, t.id, r.url);
  const queue = createQueue(s.rt.redis, s.rt.keys, s.rt.keys.intakeQueue);
  cleanup.push(() => queue.close());
  return { s, r, t, queue };
}

describe('dedup promote: intake, then worker', () => {
  it("the intake marks a job promoted once its ids are; the worker redoes an unmarked job's promote and trusts a marked one", async () => {
    const { s, r, t, queue } = await tenantWithReceiver();

    // Through the intake (no worker yet): the job it added ends up marked.
    expect((await s.services.intake.submit(makeEvent(t.id, 'via-intake'))).duplicate).toBe(false);
    const [job] = await queue.getJobs(['wait']);
    await waitFor(
      async () => (await s.rt.redis.hget(queue.toKey(job!.id!), 'progress')) === '1',
      'the job marked promoted',
    );

    // Jobs added as an intake would, but whose promote never ran (the process died after the add):
    // one unmarked, one marked as if it had run.
    await queue.add('batch', { v: 1, events: [eventToWire(makeEvent(t.id, 'lost-promote'))] }, JOB_OPTS);
    const marked = await queue.add(
      'batch',
      { v: 1, events: [eventToWire(makeEvent(t.id, 'marked'))] },
      JOB_OPTS,
    );
    await s.rt.redis.hset(queue.toKey(marked.id!), 'progress', '1');

    await s.worker();
    await waitFor(() => r.got.size === 3, 'all three delivered');
    // The unmarked job's id was promoted by the worker: accepting it again is a duplicate.
    expect((await s.services.intake.submit(makeEvent(t.id, 'lost-promote'))).duplicate).toBe(true);
    expect((await s.services.intake.submit(makeEvent(t.id, 'via-intake'))).duplicate).toBe(true);
    // The marked one was trusted, not redone: its id (never promoted here) is not seen.
    expect((await s.services.intake.submit(makeEvent(t.id, 'marked'))).duplicate).toBe(false);
  });

  it("an unmarked job's event deduplicated on another key (a GitHub body: `d`) is promoted under that key, not its id", async () => {
    const { s, r, t, queue } = await tenantWithReceiver();
    // Added as the intake adds a GitHub event's job, whose promote never ran.
    const key = 'b:src-1:body-digest';
    await queue.add(
      'batch',
      { v: 1, events: [{ ...eventToWire(makeEvent(t.id, 'gh-1')), d: key }] },
      JOB_OPTS,
    );
    await s.worker();
    await waitFor(() => r.got.size === 1, 'delivered');
    // The same body under a fresh id (a replay, or the provider's retry after a lost promote) is a
    // duplicate; the id itself was never the key.
    const again = await s.services.intake.submit(makeEvent(t.id, 'gh-2'), { dedupKey: key });
    expect(again).toEqual({ id: 'gh-2', duplicate: true });
    expect((await s.services.intake.submit(makeEvent(t.id, 'gh-1'))).duplicate).toBe(false);
  });

  it('a job that finished before its mark is not created again as a stray key', async () => {
    const s = await routerHarness(cleanup);
    const key = s.rt.keys.intakeQueue;
    const queue = createQueue(s.rt.redis, s.rt.keys, key);
    cleanup.push(() => queue.close());
    const gone = queue.toKey('no-such-job');
    expect(await withCommands(s.rt.redis).jobPromoted(gone)).toBe(0);
    expect(await s.rt.redis.exists(gone)).toBe(0);
  });
});

import { randomBytes } from 'node:crypto';
import {
  ensureHistoryTopics,
  HistoryWriter,
  historyTopics,
  MAX_BUFFERED_EVENT_BYTES,
} from '@spillway/router/testing';
import { afterEach, describe, expect, it } from 'vitest';
import { makeEvent, routerRuntime } from '../../../test/helpers/router-fixtures.ts';

const cleanup: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

describe('HistoryWriter', () => {
  it('asks the intake to wait (room) while its event records waiting for a send pass the byte budget, and lets it go once they are written', async () => {
    const rt = routerRuntime();
    const partitions = await ensureHistoryTopics(rt.kafka, rt.config);
    const h = new HistoryWriter({
      kafka: rt.kafka,
      redis: rt.redis,
      keys: rt.keys,
      logger: rt.logger,
      topics: historyTopics(rt.config),
      partitions,
      retention: rt.config.recordRetention,
    });
    cleanup.push(async () => {
      await h.close();
      await rt.close();
    });
    // Under the budget: no wait at all.
    h.event(makeEvent('acme', 'evt_small'), ['ep1']);
    expect(h.room()).toBeUndefined();
    // Bodies whose records add up past the budget, handed over in one turn (before any send).
    const body = randomBytes(512 * 1024);
    const n = Math.ceil(MAX_BUFFERED_EVENT_BYTES / ((body.length * 4) / 3)) + 1;
    for (let i = 0; i < n; i++) h.event({ ...makeEvent('acme', `evt_big_${i}`), body }, ['ep1']);
    const wait = h.room();
    expect(wait).toBeInstanceOf(Promise);
    let released = false;
    void wait!.then(() => {
      released = true;
    });
    await new Promise((r) => setImmediate(r));
    expect(released).toBe(false);
    // The writer sends them (Kafka acknowledges), and the wait ends.
    await h.flush();
    await wait;
    expect(released).toBe(true);
    expect(h.room()).toBeUndefined();
  });
});

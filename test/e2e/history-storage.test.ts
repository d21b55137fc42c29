import { historyTopics } from '@spillway/router/testing';
import { Queue } from 'bullmq';
import kafkajs from 'kafkajs';
import { afterEach, describe, expect, it } from 'vitest';
import { makeEndpoint, makeEvent, makeTenant, routerHarness } from '../helpers/router-fixtures.ts';
import { scrape } from '../helpers/router-metrics.ts';
import { waitFor } from '../helpers/wait.ts';

const { ConfigResourceTypes } = kafkajs;

const cleanup: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c().catch(() => {});
});

/**
 * Keys that may live without a TTL, and who bounds them: the config (deleted with its tenant), the
 * shared counters (a few fields per endpoint), the DLQ list (capped and aged by the archiver), and
 * BullMQ's queues (jobs removed on completion; failed ones and operator-keyed ones bounded by count and age).
 */
const OWNED = [
  /:tenants$/,
  /:sources$/,
  /:apikeys$/,
  /:workers$/,
  /:\{t:[^}]+\}:(tenant|endpoints|rev|keys|counters|dlq)$/,
  /^\{[^}]+\}:(intake|retry):/,
];

/** What `fn` answered, and how many history messages it read back from Kafka. */
async function readsDuring<T>(fn: () => Promise<T>): Promise<[T, number]> {
  const before = await scrape();
  const out = await fn();
  const read = (await scrape()).value('spillway_history_read_records_total');
  return [out, read - before.value('spillway_history_read_records_total')];
}

describe('storage: every Redis key expires or is owned; history is bounded by time and count', () => {
  it('after accepts, deliveries, retries, dead letters and a replay, every key the history wrote has a TTL', async () => {
    const s = await routerHarness(cleanup, {
      SPILLWAY_RETRY_SCHEDULE: '20ms',
      SPILLWAY_RECORD_RETENTION: '168h,10',
    });
    let ok = false;
    const r = await s.receiver(() => ({ status: ok ? 200 : 404 }));
    const t = await makeTenant(s.store);
    const ep = await makeEndpoint(s.store, t.id, r.url);
    const w = await s.worker();
    for (let i = 0; i < 30; i++) await s.services.intake.submit(makeEvent(t.id, `k${i}`));
    await waitFor(async () => (await s.services.listDlq(t.id)).length === 30, 'all failed', 20_000);
    ok = true;
    await s.services.replayDlq(t.id);
    await waitFor(() => r.got.size === 30, 'replayed');
    await w.history.flush();
    await waitFor(
      async () => (await s.services.getEvent(t.id, 'k3'))?.deliveries[0]?.status === 'delivered',
      'logged',
    );

    const keys: string[] = [];
    let cursor = '0';
    do {
      const [next, batch] = await s.rt.redis.scan(cursor, 'MATCH', `*${s.rt.keys.prefix}*`, 'COUNT', 1000);
      cursor = next;
      keys.push(...batch);
    } while (cursor !== '0');
    expect(keys.length).toBeGreaterThan(10);
    const unowned: string[] = [];
    for (const k of keys) {
      if (OWNED.some((re) => re.test(k))) continue;
      if ((await s.rt.redis.pttl(k)) < 0) unowned.push(k);
    }
    expect(unowned).toEqual([]);

    // A finished intake or retry job leaves nothing behind (its events are in the history); only a
    // job keyed by an operator's request (the replay's) keeps its record, for idempotency.
    const kept = async (name: string) => {
      const q = new Queue(name, { connection: s.rt.redis as never, prefix: s.rt.keys.bullPrefix });
      try {
        return (await q.getJobs(['completed'])).map((j) => j.id ?? '');
      } finally {
        await q.close();
      }
    };
    expect(await kept(s.rt.keys.intakeQueue)).toEqual([]);
    const retryKept = await kept(s.rt.keys.retryQueue);
    expect(retryKept.length).toBeGreaterThan(0);
    expect(retryKept.filter((id) => !id.startsWith('replay-'))).toEqual([]);

    // Capped by count: 60 failed attempts, the endpoint's set keeps the newest 10.
    expect(await s.rt.redis.zcard(s.rt.keys.failedAttempts(t.id, ep.id))).toBe(10);
    expect(await s.rt.redis.zcard(s.rt.keys.failedEvents(t.id))).toBe(10);
    // Nothing per event but the compact forms: no record hash, no marker beyond a minute.
    expect(keys.filter((k) => /:ev:|:dedup:/.test(k))).toEqual([]);

    // The Kafka topics keep the history for the retention, not forever.
    const admin = s.rt.kafka.admin();
    await admin.connect();
    const topics = historyTopics(s.rt.config);
    const cfg = await admin.describeConfigs({
      includeSynonyms: false,
      resources: Object.values(topics).map((name) => ({
        type: ConfigResourceTypes.TOPIC,
        name,
        configNames: ['retention.ms'],
      })),
    });
    await admin.disconnect();
    for (const res of cfg.resources) expect(res.configEntries[0]?.configValue).toBe(String(168 * 3_600_000));
  });

  it('an index, not a scan: listing a quiet tenant reads its own minute ranges, whatever a busy tenant on the same partition logged', async () => {
    const s = await routerHarness(cleanup, { SPILLWAY_HISTORY_PARTITIONS: '1' });
    const r = await s.receiver();
    const quiet = await makeTenant(s.store);
    // Created 20 min ago: the late event below was accepted 10 min ago, and an event accepted
    // before its tenant was created belongs to an earlier incarnation (discarded at fan-out).
    await s.store.updateTenant(quiet.id, (x) => ({
      ...x,
      createdAt: new Date(Date.now() - 1_200_000).toISOString(),
    }));
    const busy = await makeTenant(s.store, { maxInFlight: 2000, concurrency: 64 });
    await makeEndpoint(s.store, quiet.id, r.url);
    await makeEndpoint(s.store, busy.id, r.url);
    const w = await s.worker();
    // One at a time: the log is in fan-out order, and two events fanned out together may be
    // logged in either order.
    for (let i = 0; i < 5; i++) {
      await s.services.intake.submit(makeEvent(quiet.id, `quiet-${i}`));
      await waitFor(() => r.got.size === i + 1, `quiet-${i} delivered`);
    }
    await w.history.flush();
    await Promise.all(
      Array.from({ length: 2000 }, (_, i) => s.services.intake.submit(makeEvent(busy.id, `busy-${i}`))),
    );
    await waitFor(() => r.got.size === 2005, 'busy delivered', 60_000);
    await w.history.flush();

    const [page, read] = await readsDuring(() => s.services.history.listEvents(quiet.id, { limit: 50 }));
    expect(page.data.map((e) => e.id)).toEqual(['quiet-4', 'quiet-3', 'quiet-2', 'quiet-1', 'quiet-0']);
    expect(page.data.every((e) => e.status === 'delivered')).toBe(true);
    // Its 5 events and their 5 attempts; the busy tenant's 4,000 records on the partition stay unread.
    expect(read).toBeLessThanOrEqual(20);
    // The same for one event by id.
    const [one, readOne] = await readsDuring(() => s.services.getEvent(quiet.id, 'quiet-2'));
    expect(one?.deliveries[0]?.status).toBe('delivered');
    expect(readOne).toBeLessThanOrEqual(20);
    // A first attempt long after the accept (a pause, a backlog) is indexed, so the event view finds it.
    const old = { ...makeEvent(quiet.id, 'quiet-late'), receivedAt: Date.now() - 600_000 };
    await s.services.intake.submit(old);
    await waitFor(() => r.got.has('quiet-late'), 'late one delivered');
    await w.history.flush();
    const ep = (await s.store.listEndpoints(quiet.id))[0]!;
    await waitFor(
      async () =>
        (await s.rt.redis.zrange(s.rt.keys.laterAttempts(quiet.id, ep.id), 0, -1)).some((m) =>
          m.includes('quiet-late'),
        ),
      'indexed as a later attempt',
    );
  }, 90_000);
  it("one Kafka message packs a tenant's records of a flush; a page that ends inside one goes on inside it", async () => {
    const s = await routerHarness(cleanup);
    const r = await s.receiver();
    const t = await makeTenant(s.store, { maxInFlight: 500 });
    const ep = await makeEndpoint(s.store, t.id, r.url);
    const w = await s.worker();
    const N = 40;
    await Promise.all(
      Array.from({ length: N }, (_, i) => s.services.intake.submit(makeEvent(t.id, `p${i}`))),
    );
    await waitFor(() => r.got.size === N, 'delivered');
    await w.history.flush();
    // Packed: the 40 events and their 40 attempts are read back from far fewer messages.
    const [all, read] = await readsDuring(() => s.services.history.listEvents(t.id, { limit: 100 }));
    expect(all.data).toHaveLength(N);
    expect(read).toBeLessThan(N);
    // Pages of 7 walk every event once, newest first, the same order as one page of all.
    const paged: string[] = [];
    let cursor: string | undefined;
    do {
      const page = await s.services.history.listEvents(t.id, { limit: 7, cursor });
      expect(page.data.length).toBeLessThanOrEqual(7);
      paged.push(...page.data.map((e) => e.id));
      cursor = page.next;
    } while (cursor);
    expect(paged).toEqual(all.data.map((e) => e.id));
    // The endpoint's attempts page the same way.
    const attempts: string[] = [];
    do {
      const page = await s.services.history.endpointAttempts(t.id, ep.id, { limit: 6, cursor });
      attempts.push(...page.data.map((a) => a.eventId));
      cursor = page.next;
    } while (cursor);
    expect(attempts.sort()).toEqual(Array.from({ length: N }, (_, i) => `p${i}`).sort());
  });

  it("records past a pack's byte cap go on in further messages of the same flush; every one is listed, large bodies whole", async () => {
    const s = await routerHarness(cleanup);
    const t = await makeTenant(s.store);
    const w = await s.worker();
    const topic = historyTopics(s.rt.config).events;
    const admin = s.rt.kafka.admin();
    await admin.connect();
    cleanup.push(() => admin.disconnect());
    const offsets = async () =>
      new Map((await admin.fetchTopicOffsets(topic)).map((p) => [p.partition, BigInt(p.high)]));
    const before = await offsets();
    // 8 bodies of 100 KiB (about 1.1 MB of records, base64 in JSON) and a small one, in one flush.
    const big = Array.from({ length: 8 }, (_, i) => ({
      ...makeEvent(t.id, `big-${i}`),
      body: Buffer.alloc(100 * 1024, 0x61 + i),
    }));
    for (const ev of big) w.history.event(ev, ['ep-x']);
    w.history.event(makeEvent(t.id, 'small'), ['ep-x']);
    await w.history.flush();
    // More than one message (a pack closes past its cap), far fewer than one per record; each
    // message a JSON array of whole records, every body as it was logged.
    const { KafkaRangeReader, unpackRecords } = await import('@spillway/router/testing');
    const reader = new KafkaRangeReader(s.rt.kafka);
    cleanup.push(() => reader.close());
    let messages = 0;
    const bodies = new Map<string, string>();
    for (const [partition, high] of await offsets()) {
      const from = before.get(partition) ?? 0n;
      if (high > from)
        await reader.read(topic, partition, from, high - 1n, (r) => {
          if (r.key !== t.id) return;
          messages++;
          for (const rec of unpackRecords<{ i: string; b: string }>(r.value)) bodies.set(rec.i, rec.b);
        });
    }
    expect(messages).toBeGreaterThan(1);
    expect(messages).toBeLessThan(9);
    for (const ev of big) expect(bodies.get(ev.id)).toBe(ev.body.toString('base64'));
    expect(bodies.has('small')).toBe(true);
    const page = await s.services.history.listEvents(t.id, { limit: 50 });
    expect(page.data.map((e) => e.id).sort()).toEqual([...big.map((e) => e.id), 'small'].sort());
  });
});

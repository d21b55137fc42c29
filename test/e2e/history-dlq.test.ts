import { randomBytes } from 'node:crypto';
import { createRouterServices } from '@spillway/router';
import { HistoryReader, historyTopics } from '@spillway/router/testing';
import { afterEach, describe, expect, it } from 'vitest';
import {
  makeEndpoint,
  makeEvent,
  makeTenant,
  routerHarness,
  startReceiver,
} from '../helpers/router-fixtures.ts';
import { adminCall, adminCli, type StartedRouter, startRouter } from '../helpers/router-started.ts';
import { waitFor } from '../helpers/wait.ts';

const cleanup: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c().catch(() => {});
});

/** Counts the tenant's records in the DLQ archive topic (reads every partition from 0). */
async function archived(s: Awaited<ReturnType<typeof routerHarness>>, tenantId: string): Promise<string[]> {
  const { KafkaRangeReader } = await import('@spillway/router/testing');
  const reader = new KafkaRangeReader(s.rt.kafka);
  const ids: string[] = [];
  const admin = s.rt.kafka.admin();
  await admin.connect();
  const topic = historyTopics(s.rt.config).dlq;
  for (const p of await admin.fetchTopicOffsets(topic))
    if (BigInt(p.high) > 0n)
      await reader.read(topic, p.partition, 0n, BigInt(p.high) - 1n, (r) => {
        if (r.key === tenantId) ids.push((JSON.parse(r.value.toString()) as { eventId: string }).eventId);
      });
  await admin.disconnect();
  await reader.close();
  return ids;
}

describe('DLQ: bounded, archived, paged, purged', () => {
  it('past its cap the oldest dead letters move to the Kafka archive (none lost), and past the TTL too', async () => {
    const s = await routerHarness(cleanup, {
      SPILLWAY_RETRY_SCHEDULE: '10ms',
      SPILLWAY_DLQ_CAP: '50',
      SPILLWAY_DLQ_TTL: '2s',
    });
    const r = await s.receiver(() => ({ status: 404 }));
    const t = await makeTenant(s.store, { maxInFlight: 500 });
    await makeEndpoint(s.store, t.id, r.url);
    const w = await s.worker();
    const N = 120;
    // The cap is hard (a full list takes no write until its oldest are archived): sampled every
    // few ms while it overflows, the list never holds more than 50.
    let most = 0;
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        most = Math.max(most, await s.rt.redis.llen(s.rt.keys.dlq(t.id)));
        await new Promise((res) => setTimeout(res, 2));
      }
    })();
    for (let i = 0; i < N; i++) await s.services.intake.submit(makeEvent(t.id, `q${i}`));
    // Every delivery ends either in the Redis DLQ (at most the cap) or in the archive. An entry
    // leaves the list only after Kafka acknowledged it, so for a moment it can be in both: count
    // distinct event ids, not lengths.
    await waitFor(
      async () => {
        const inRedis = (await s.services.listDlq(t.id, { limit: 1000 })).map((e) => e.eventId);
        expect(inRedis.length).toBeLessThanOrEqual(50);
        const inKafka = await archived(s, t.id);
        return new Set([...inKafka, ...inRedis]).size === N;
      },
      'overflow archived',
      30_000,
    );
    sampling = false;
    await sampler;
    expect(most).toBeGreaterThan(40); // it did fill up to where archiving starts (cap - a tenth)
    expect(most).toBeLessThanOrEqual(50);
    // The oldest went to the archive; the Redis list keeps the newest (some, not all, archived).
    expect((await archived(s, t.id)).length).toBeGreaterThanOrEqual(N - 50);
    // Past the TTL the rest follows (the sweep every worker runs).
    await new Promise((res) => setTimeout(res, 2100));
    await w.dlqArchiver.sweep();
    expect(await s.rt.redis.llen(s.rt.keys.dlq(t.id))).toBe(0);
    expect(new Set(await archived(s, t.id)).size).toBe(N);
    // The archived failures are still what a recover finds (the history's failed attempts).
    const reader = new HistoryReader({
      redis: s.rt.redis,
      keys: s.rt.keys,
      kafka: s.rt.kafka,
      topics: historyTopics(s.rt.config),
      retentionMs: s.rt.config.recordRetention.ms,
    });
    cleanup.push(() => reader.close());
    await waitFor(
      async () =>
        (await reader.failedSince(t.id, (await s.store.listEndpoints(t.id))[0]!.id, 0)).length === N,
      'failed attempts indexed',
    );
  });

  let router: StartedRouter | undefined;
  it('pages past 1,000 with a cursor, counts the total, purges per endpoint and all', async () => {
    router = await startRouter('all', {
      SPILLWAY_RETRY_SCHEDULE: '10ms',
      SPILLWAY_TARGET_ALLOW_CIDRS: '127.0.0.1/32',
    });
    cleanup.push(() => router!.close());
    const r = await startReceiver(() => ({ status: 404 }));
    cleanup.push(() => r.close());
    const services = createRouterServices(router.s.rt);
    cleanup.push(() => services.close());
    const call = adminCall(router);
    const tid = `dq-${randomBytes(3).toString('hex')}`;
    await call('POST', '/v1/tenants', { id: tid, limits: { maxInFlight: 2000, concurrency: 64 } });
    await call('POST', `/v1/tenants/${tid}/endpoints`, { id: 'a', url: r.url });
    await call('POST', `/v1/tenants/${tid}/endpoints`, { id: 'b', url: r.url, eventTypes: ['b.*'] });
    const N = 1100;
    // 50 at a time: 1,100 sockets opened at once overflow a loaded machine's accept queue.
    for (let from = 0; from < N; from += 50)
      await Promise.all(
        Array.from({ length: Math.min(50, N - from) }, (_, k) =>
          call('POST', `/v1/tenants/${tid}/events`, {
            id: `d${from + k}`,
            type: from + k < 100 ? 'b.x' : 'a.x',
            payload: {},
          }),
        ),
      );
    await waitFor(
      async () => (await call('GET', `/v1/tenants/${tid}/dlq?limit=1`)).body.total === N + 100,
      'all failed',
      60_000,
    );
    // The CLI pages the same way: a page of 1,000, the total, and the cursor to go on with.
    const first = await adminCli(router, ['dlq', 'list', tid, '--endpoint', 'a', '--limit', '1000']);
    expect(first.code).toBe(0);
    const more = /(\d+) in the DLQ; more: --cursor (\S+)/.exec(first.out);
    expect(more?.[1]).toBe(String(N));
    expect(first.out.trim().split('\n')).toHaveLength(1 + 1000 + 1); // header, rows, total line
    const second = await adminCli(router, [
      'dlq',
      'list',
      tid,
      '--endpoint',
      'a',
      '--limit',
      '1000',
      '--cursor',
      more![2]!,
    ]);
    expect(second.code).toBe(0);
    expect(second.out.trim().split('\n')).toHaveLength(1 + (N - 1000) + 1);
    expect(second.out).toMatch(new RegExp(`${N} in the DLQ\n$`));
    const seen: string[] = [];
    let cursor: string | undefined;
    let pages = 0;
    do {
      const p = await call(
        'GET',
        `/v1/tenants/${tid}/dlq?endpointId=a&limit=1000${cursor ? `&cursor=${cursor}` : ''}`,
      );
      expect(p.body.total).toBe(N);
      seen.push(...p.body.data.map((e: { eventId: string }) => e.eventId));
      cursor = p.body.next;
      pages++;
    } while (cursor);
    expect(pages).toBeGreaterThanOrEqual(2);
    expect(new Set(seen).size).toBe(N);
    // Purge one endpoint, then all.
    const purgeB = await adminCli(router, ['dlq', 'purge', tid, '--endpoint', 'b']);
    expect(purgeB).toMatchObject({ code: 0, out: 'purged 100\n' });
    expect((await call('GET', `/v1/tenants/${tid}/dlq?limit=1`)).body.total).toBe(N);
    expect((await call('DELETE', `/v1/tenants/${tid}/dlq?endpointId=nope`)).status).toBe(404);
    // Replay reports progress past 1,000.
    const progress: number[] = [];
    const replayed = await services.replayDlq(tid, {
      onProgress: (done, total) => progress.push(done, total),
    });
    expect(replayed).toBe(N);
    expect(progress.at(-2)).toBe(N);
    expect(progress.at(-1)).toBe(N);
    await waitFor(
      async () => (await call('GET', `/v1/tenants/${tid}/dlq?limit=1`)).body.total === N,
      'back in the DLQ',
      60_000,
    );
    // Deleting an endpoint takes its dead letters with it, counted (one created again under the
    // same id starts with an empty DLQ); the rest of the tenant's DLQ stays.
    await call('POST', `/v1/tenants/${tid}/endpoints`, { id: 'c', url: r.url, eventTypes: ['c.*'] });
    // c0 goes to c and to a (which takes every type).
    await call('POST', `/v1/tenants/${tid}/events`, { id: 'c0', type: 'c.x', payload: {} });
    await waitFor(
      async () => (await call('GET', `/v1/tenants/${tid}/dlq?limit=1`)).body.total === N + 2,
      'c0 dead-lettered',
      60_000,
    );
    expect((await call('DELETE', `/v1/tenants/${tid}/endpoints/c`)).status).toBe(204);
    expect((await call('GET', `/v1/tenants/${tid}/dlq?endpointId=c`)).body).toEqual({ data: [], total: 0 });
    expect((await call('GET', `/v1/tenants/${tid}/dlq?limit=1`)).body.total).toBe(N + 1);
    expect((await call('DELETE', `/v1/tenants/${tid}/dlq`)).body).toEqual({ purged: N + 1 });
    expect((await call('GET', `/v1/tenants/${tid}/dlq`)).body).toEqual({ data: [], total: 0 });
  }, 240_000);
});

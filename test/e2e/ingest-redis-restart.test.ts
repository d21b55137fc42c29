import { randomBytes } from 'node:crypto';
import { sign as githubSign } from '@octokit/webhooks-methods';
import { ConfigStore, type Started, start } from '@spillway/router';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testEnv } from '../helpers/env.ts';
import { seedGithubSourceIn } from '../helpers/github-source.ts';
import { PrivateRedis } from '../helpers/redis-server.ts';
import { waitFor } from '../helpers/wait.ts';

/**
 * The ingest role on the real router intake (BullMQ, group commit) against a private Redis that the
 * test stops and starts: 503 + Retry-After while it is down, never a 2xx; 202 again once it is back,
 * in the same process; and the events answered 202 are still there after the restart (AOF).
 */
describe('ingest role across a Redis restart', () => {
  let own: PrivateRedis;
  let sp: Started;
  const tenant = `t-${randomBytes(3).toString('hex')}`;
  const sourceId = `gh-${randomBytes(3).toString('hex')}`;

  beforeAll(async () => {
    own = new PrivateRedis();
    await own.start();
    sp = await start('ingest', testEnv({ SPILLWAY_REDIS_URL: own.url, SPILLWAY_INGEST_BACKEND: 'node' }));
    await seedGithubSourceIn(new ConfigStore(sp.rt.redis, sp.rt.keys, sp.rt.secrets), { tenant, sourceId });
  });

  afterAll(async () => {
    await sp?.close();
    await own?.destroy();
  });

  const send = async (id: string) => {
    const body = Buffer.from(`{"n":"${id}"}`);
    const res = await fetch(`http://127.0.0.1:${sp.ingestPort}/ingest/${sourceId}`, {
      method: 'POST',
      body,
      headers: {
        'x-hub-signature-256': await githubSign('sec', body.toString()),
        'x-github-event': 'push',
        'x-github-delivery': id,
      },
      signal: AbortSignal.timeout(15_000),
    });
    return { status: res.status, retryAfter: res.headers.get('retry-after') };
  };

  it('503 + Retry-After while Redis is down, 202 again after it restarts, without restarting Spillway', async () => {
    const before = `a-${randomBytes(4).toString('hex')}`;
    expect((await send(before)).status).toBe(202);

    await own.stop();
    const down = await send(`b-${randomBytes(4).toString('hex')}`);
    expect(down.status).toBe(503);
    expect(Number(down.retryAfter)).toBeGreaterThanOrEqual(1);

    await own.start();
    const after = `c-${randomBytes(4).toString('hex')}`;
    const status = await waitFor(
      async () => {
        const s = (await send(after)).status;
        return s === 503 ? undefined : s;
      },
      'ingest to accept again',
      30_000,
      250,
    );
    // The attempt that got through may find the event made durable by an earlier attempt that was
    // answered 503 (its commit landed late): a duplicate is an honest answer then.
    expect([200, 202]).toContain(status);
    expect((await send(after)).status).toBe(200);
    // What was answered 202 before the restart survived it (AOF): its dedup marker is still there.
    expect((await send(before)).status).toBe(200);
  });
});

import { randomBytes } from 'node:crypto';
import { sign as githubSign } from '@octokit/webhooks-methods';
import { ConfigStore, type Started, start } from '@spillway/router';
import { loadConfig } from '@spillway/shared';
import { afterEach, describe, expect, it } from 'vitest';
import { testEnv } from '../helpers/env.ts';
import { seedGithubSourceIn } from '../helpers/github-source.ts';
import { spawnSpillway } from '../helpers/spawn.ts';

/**
 * What the ingest role shows and needs (issue 15): /metrics behind SPILLWAY_METRICS_TOKEN when set
 * and never labelled by source id; the admin port on loopback unless told otherwise; /readyz of an
 * ingest process ready without Kafka (it never uses it); a malformed SPILLWAY_REDIS_URL not echoed
 * with its password.
 */
const started: Started[] = [];
afterEach(async () => {
  while (started.length) await started.pop()!.close();
});

async function ingestWithSource(env: Record<string, string>) {
  const sp = await start('ingest', testEnv(env));
  started.push(sp);
  const { sourceId } = await seedGithubSourceIn(new ConfigStore(sp.rt.redis, sp.rt.keys, sp.rt.secrets));
  const send = async () => {
    const body = `{"n":"${randomBytes(4).toString('hex')}"}`;
    const res = await fetch(`http://127.0.0.1:${sp.ingestPort}/ingest/${sourceId}`, {
      method: 'POST',
      body,
      headers: {
        'x-hub-signature-256': await githubSign('sec', body),
        'x-github-event': 'push',
        'x-github-delivery': randomBytes(8).toString('hex'),
      },
      signal: AbortSignal.timeout(10_000),
    });
    return res.status;
  };
  return { sp, sourceId, send, admin: `http://127.0.0.1:${sp.adminPort}` };
}

describe('ingest role exposure', () => {
  it('/metrics needs the bearer SPILLWAY_METRICS_TOKEN when set, and carries no source id', async () => {
    const token = randomBytes(24).toString('hex');
    const { send, sourceId, admin } = await ingestWithSource({
      SPILLWAY_METRICS_TOKEN: token,
      SPILLWAY_INGEST_BACKEND: 'node',
    });
    expect(await send()).toBe(202);
    expect((await fetch(`${admin}/metrics`)).status).toBe(401);
    expect(
      (await fetch(`${admin}/metrics`, { headers: { authorization: `Bearer ${token.slice(1)}x` } })).status,
    ).toBe(401);
    const ok = await fetch(`${admin}/metrics`, { headers: { authorization: `Bearer ${token}` } });
    expect(ok.status).toBe(200);
    const text = await ok.text();
    expect(text).toMatch(/spillway_ingest_requests_total\{kind="github",outcome="accepted"\} [1-9]/);
    expect(text).not.toContain(sourceId);
    // Health stays open: load balancers and kubelets do not carry tokens.
    expect((await fetch(`${admin}/healthz`)).status).toBe(200);
  });

  it('the admin port listens on loopback unless SPILLWAY_ADMIN_HOST says otherwise', async () => {
    const env = testEnv();
    delete (env as Record<string, string | undefined>).SPILLWAY_HOST;
    const config = loadConfig(env);
    expect(config.host).toBe('0.0.0.0');
    expect(config.adminHost).toBe('127.0.0.1');
    expect(loadConfig({ ...env, SPILLWAY_ADMIN_HOST: '0.0.0.0' }).adminHost).toBe('0.0.0.0');
    expect(() => loadConfig({ ...env, SPILLWAY_METRICS_TOKEN: 'short' })).toThrow(/SPILLWAY_METRICS_TOKEN/);
  });

  it('an ingest role pointed at a closed Kafka port starts, is ready, and accepts', async () => {
    const { send, admin } = await ingestWithSource({
      SPILLWAY_KAFKA_BROKERS: '127.0.0.1:1',
      SPILLWAY_INGEST_BACKEND: 'node',
    });
    const res = await fetch(`${admin}/readyz`);
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ status: 'ready', redis: true });
    expect(await send()).toBe(202);
  });

  it('a malformed SPILLWAY_REDIS_URL is named in one line without its password', async () => {
    const secret = `pw${randomBytes(8).toString('hex')}`;
    for (const url of [`redis//user:${secret}@host:6379`, `redis://:${secret}@`, `user:${secret}@h`]) {
      expect(() => loadConfig(testEnv({ SPILLWAY_REDIS_URL: url }))).toThrow(/SPILLWAY_REDIS_URL/);
      try {
        loadConfig(testEnv({ SPILLWAY_REDIS_URL: url }));
      } catch (err) {
        expect((err as Error).message).not.toContain(secret);
      }
    }
    const p = spawnSpillway(['start'], testEnv({ SPILLWAY_REDIS_URL: `redis//admin:${secret}@db:6379` }));
    expect(await p.exited).toBe(1);
    const lines = p.stderr().trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain('SPILLWAY_REDIS_URL');
    expect(lines[0]).not.toContain(secret);
  });
});

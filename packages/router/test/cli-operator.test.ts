import { randomBytes } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testEnv } from '../../../test/helpers/env.ts';
import { type Spawned, spawnSpillway } from '../../../test/helpers/spawn.ts';
import { waitFor } from '../../../test/helpers/wait.ts';

/**
 * The `spillway` operator CLI as a subprocess against a live `spillway start` (also a subprocess):
 * create, pause, inspect, resume, events, dlq list and replay with its progress bar.
 */
let server: Spawned;
let env: Record<string, string>;
let adminUrl: string;
let receiver: http.Server;
let receiverUrl: string;
let failing = true;
let delivered = 0;

beforeAll(async () => {
  receiver = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      if (!failing) delivered++;
      res.statusCode = failing ? 500 : 200;
      res.end();
    });
  });
  await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
  receiverUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}`;
  env = testEnv({ SPILLWAY_RETRY_SCHEDULE: '50ms', SPILLWAY_TARGET_ALLOW_CIDRS: '127.0.0.1/32' });
  server = spawnSpillway(['start'], env);
  const port = await waitFor(
    () => /admin:\s+http:\/\/[\d.]+:(\d+)/.exec(server.stdout())?.[1],
    `the admin URL (stderr: ${server.stderr()})`,
    30_000,
  );
  adminUrl = `http://127.0.0.1:${port}`;
}, 40_000);

afterAll(async () => {
  server?.child.kill('SIGTERM');
  await server?.exited;
  await new Promise((r) => receiver?.close(r));
});

async function cli(
  args: string[],
  extraEnv: Record<string, string> = {},
): Promise<{ code: number | null; out: string; err: string }> {
  const p = spawnSpillway(args, {
    SPILLWAY_ADMIN_URL: adminUrl,
    SPILLWAY_ADMIN_TOKEN: env.SPILLWAY_ADMIN_TOKEN!,
    ...extraEnv,
  });
  const code = await p.exited;
  return { code, out: p.stdout(), err: p.stderr() };
}

async function cliJson<T = any>(args: string[]): Promise<T> {
  const r = await cli([...args, '--json']);
  expect(r.code, `${args.join(' ')}: ${r.err}`).toBe(0);
  return JSON.parse(r.out) as T;
}

async function api(path: string): Promise<any> {
  const res = await fetch(adminUrl + path, {
    headers: { authorization: `Bearer ${env.SPILLWAY_ADMIN_TOKEN}` },
  });
  return res.json();
}

describe('spillway operator CLI', () => {
  const tid = `cli-${randomBytes(3).toString('hex')}`;

  it('creates a tenant, endpoint and source; lists them as tables and JSON', async () => {
    const t = await cliJson([
      'tenants',
      'create',
      tid,
      '--concurrency',
      '4',
      '--rate-per-second',
      '20',
      '--rate-burst',
      '40',
    ]);
    expect(t).toMatchObject({
      id: tid,
      status: 'active',
      limits: { maxInFlight: 1000, concurrency: 4, rate: { perSecond: 20, burst: 40 } },
    });
    const ep = await cliJson([
      'endpoints',
      'create',
      tid,
      `${receiverUrl}/hook`,
      '--id',
      'ep1',
      '--event-types',
      'order.*,invoice.paid',
    ]);
    expect(ep).toMatchObject({
      id: 'ep1',
      eventTypes: ['order.*', 'invoice.paid'],
      secret: expect.stringMatching(/^whsec_/),
    });
    const src = await cliJson([
      'sources',
      'create',
      tid,
      '--kind',
      'github',
      '--secret',
      'gh',
      '--id',
      `${tid}-gh`,
      '--allow-cidrs',
      '192.30.252.0/22',
    ]);
    expect(src).toMatchObject({ ingestPath: `/ingest/${tid}-gh`, allowCidrs: ['192.30.252.0/22'] });

    const list = await cli(['tenants', 'list']);
    expect(list.code).toBe(0);
    expect(list.out).toMatch(/^ID\s+STATUS\s+MAXINFLIGHT/m);
    expect(list.out).toMatch(new RegExp(`^${tid}\\s+active\\s+1000\\s+4\\s+20/s burst 40`, 'm'));
    expect(
      (await cliJson<{ data: { id: string }[] }>(['endpoints', 'list', tid])).data.map((e) => e.id),
    ).toEqual(['ep1']);
    expect(
      (await cliJson<{ data: { id: string }[] }>(['sources', 'list', tid])).data.map((e) => e.id),
    ).toEqual([`${tid}-gh`]);
    expect((await cliJson(['endpoints', 'get', tid, 'ep1'])).url).toBe(`${receiverUrl}/hook`);
  }, 60_000);

  it('pause, inspect, resume', async () => {
    const paused = await cli(['tenants', 'pause', tid]);
    expect(paused.code, paused.err).toBe(0);
    expect(paused.out.trim()).toBe(`tenant ${tid} paused`);
    expect((await api(`/v1/tenants/${tid}`)).status).toBe('paused');

    const inspect = await cli(['tenants', 'inspect', tid]);
    expect(inspect.code, inspect.err).toBe(0);
    expect(inspect.out).toMatch(/^Tenant$/m);
    expect(inspect.out).toMatch(/status\s+paused/);
    expect(inspect.out).toMatch(/^Stats$/m);
    expect(inspect.out).toMatch(/credits\s+0\/1000/);
    expect(inspect.out).toMatch(
      /^ep1\s+active\s+http:\/\/127\.0\.0\.1:\d+\/hook\s+order\.\*,invoice\.paid\s+closed/m,
    );
    expect(inspect.out).toContain(`/ingest/${tid}-gh`);
    const ij = await cliJson(['tenants', 'inspect', tid]);
    expect(ij).toMatchObject({
      tenant: { id: tid, status: 'paused' },
      stats: { status: 'paused', dlq: 0 },
      endpoints: [{ id: 'ep1' }],
      sources: [{ id: `${tid}-gh` }],
    });

    expect(await cliJson(['tenants', 'resume', tid])).toEqual({ id: tid, status: 'active' });
    expect((await api(`/v1/tenants/${tid}`)).status).toBe('active');
  }, 60_000);

  it('dead letters: list, then replay with a progress bar, and they are delivered', async () => {
    for (const id of ['e1', 'e2']) {
      const sent = await cliJson([
        'events',
        'send',
        tid,
        '--type',
        'order.created',
        '--payload',
        `{"n":"${id}"}`,
        '--id',
        id,
      ]);
      expect(sent).toEqual({ id });
    }
    await waitFor(async () => (await api(`/v1/tenants/${tid}/dlq`)).data.length === 2, 'two dead letters');
    const dlq = await cliJson<{ data: { eventId: string; endpointId: string }[] }>(['dlq', 'list', tid]);
    expect(dlq.data.map((d) => d.eventId).sort()).toEqual(['e1', 'e2']);
    const table = await cli(['dlq', 'list', tid]);
    expect(table.out).toMatch(/^EVENTID\s+ENDPOINTID\s+ATTEMPTS\s+LASTERROR\s+FAILEDAT/m);

    failing = false;
    const replay = await cli(['dlq', 'replay', tid]);
    expect(replay.code, replay.err).toBe(0);
    expect(replay.out.trim()).toBe('replayed 2');
    // cli-progress writes the bar to stderr (noTTYOutput so it shows in pipes too).
    expect(replay.err).toMatch(/replaying \[[^\]]*\] 2\/2/);
    await waitFor(() => delivered >= 2, 'replayed deliveries');
    const ev = await cliJson(['events', 'get', tid, 'e1']);
    expect(ev.deliveries).toEqual([expect.objectContaining({ endpointId: 'ep1', status: 'delivered' })]);
    expect((await cliJson<{ data: unknown[] }>(['dlq', 'list', tid])).data).toEqual([]);
  }, 60_000);

  it('bench: sends events through the API to its own sink, every one delivered, then cleans up', async () => {
    const before = (await api('/v1/tenants')).data.length;
    const r = await cliJson(['bench', '--events', '200', '--concurrency', '16', '--timeout-ms', '30000']);
    expect(r).toMatchObject({ events: 200, accepted: 200, delivered: 200 });
    expect(r.acceptPerSec).toBeGreaterThan(0);
    expect(r.deliveryP99Ms).toBeGreaterThanOrEqual(r.deliveryP50Ms);
    // The throwaway tenant is gone again.
    expect((await api('/v1/tenants')).data.length).toBe(before);
  }, 60_000);

  it('errors: one line, the API error code, exit 1', async () => {
    const nf = await cli(['tenants', 'get', 'no-such-tenant']);
    expect(nf.code).toBe(1);
    expect(nf.err.trim().split('\n')).toHaveLength(1);
    expect(nf.err).toContain('not_found (404)');
    const bad = await cli(['tenants', 'list'], { SPILLWAY_ADMIN_TOKEN: 'not-the-token-at-all' });
    expect(bad.code).toBe(1);
    expect(bad.err).toContain('unauthorized (401)');
    const dup = await cli(['tenants', 'create', tid]);
    expect(dup.code).toBe(1);
    expect(dup.err).toContain('conflict (409)');
  }, 60_000);

  it('endpoint delivery options: create with flags, update and clear them, print the public key', async () => {
    const flags =
      '--id opts --retry-schedule 1s,1m --max-attempts 4 --permanent-statuses 400,422 --header X-Customer:acme --header x-region:eu --basic-auth hooks:pa:ss --signatures v1,v1a --batch-max-events 20 --batch-linger-ms 50';
    const ep = await cliJson(['endpoints', 'create', tid, 'https://example.com/opts', ...flags.split(' ')]);
    expect(ep).toMatchObject({
      retry: { schedule: ['1s', '1m'], maxAttempts: 4, permanentStatuses: [400, 422] },
      headers: { 'x-customer': 'acme', 'x-region': 'eu' },
      auth: { type: 'basic', username: 'hooks' },
      signatures: ['v1', 'v1a'],
      batch: { maxEvents: 20, lingerMs: 50 },
    });
    expect(JSON.stringify(ep)).not.toContain('pa:ss');
    const shown = await cli(['endpoints', 'get', tid, 'opts']);
    expect(shown.out).toMatch(/retry\s+schedule 1s,1m; max 4 attempts; permanent 400,422/);
    expect(shown.out).toMatch(/auth\s+basic \(hooks\)/);
    expect(shown.out).toMatch(/batch\s+20 events, 1048576 bytes, linger 50ms/);
    const key = await cli(['endpoints', 'public-key', tid, 'opts']);
    expect(key.code, key.err).toBe(0);
    expect(key.out).toContain(ep.ed25519.publicKey);
    expect(key.out).toContain('-----BEGIN PUBLIC KEY-----');

    const up = await cliJson([
      'endpoints',
      'update',
      tid,
      'opts',
      '--clear',
      'batch,headers',
      '--ordering',
      'per-key',
      '--bearer-token',
      'tok_1',
    ]);
    expect(up.batch).toBeUndefined();
    expect(up.headers).toBeUndefined();
    expect(up).toMatchObject({ ordering: 'per-key', auth: { type: 'bearer' } });
    const refused = await cli(['endpoints', 'update', tid, 'opts', '--header', 'webhook-id:x']);
    expect(refused.code).toBe(1);
    expect(refused.err).toContain('invalid_body (400)');
    const nothing = await cli(['endpoints', 'update', tid, 'opts']);
    expect(nothing.code).toBe(1);
    expect(nothing.err).toContain('nothing to update');
    const sent = await cli(['events', 'send', tid, '--type', 'order.created', '--ordering-key', 'order-1']);
    expect(sent.code, sent.err).toBe(0);
  }, 60_000);
});

import { randomBytes } from 'node:crypto';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Webhook } from 'standardwebhooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testEnv } from '../helpers/env.ts';
import { dropSpillTopic } from '../helpers/router-fixtures.ts';
import { waitFor } from '../helpers/wait.ts';
import { buildImage, podman, type RoleContainer, runRole, uidsOf } from './podman.ts';

/**
 * The container image (deploy/image/build.sh: Debian packages + Node 24, no registry) run the way a
 * cluster runs it: one container per role (admin, worker, ingest) against the suite's Redis and
 * Kafka. An event posted to the admin API and a signed provider webhook posted to the ingest
 * container both reach a sink on loopback, delivered by the worker container.
 */
interface Got {
  body: string;
  headers: IncomingHttpHeaders;
}

describe('container image', () => {
  const env = testEnv({
    // The sink is on loopback; the SSRF guard refuses loopback unless allowed.
    SPILLWAY_TARGET_ALLOW_CIDRS: '127.0.0.0/8',
    SPILLWAY_RETRY_SCHEDULE: '200ms,500ms',
  });
  const token = env.SPILLWAY_ADMIN_TOKEN!;
  const tag = randomBytes(3).toString('hex');
  const tenant = `img-${tag}`;
  const got: Got[] = [];
  let sink: Server;
  let sinkUrl: string;
  let ref: string;
  const roles: Record<string, RoleContainer> = {};
  let admin: string;

  const api = async (method: string, path: string, body?: unknown) => {
    const res = await fetch(`${admin}/v1${path}`, {
      method,
      headers: { authorization: `Bearer ${token}`, ...(body ? { 'content-type': 'application/json' } : {}) },
      ...(body ? { body: JSON.stringify(body) } : {}),
    });
    const text = await res.text();
    return { status: res.status, json: text ? (JSON.parse(text) as Record<string, unknown>) : undefined };
  };

  beforeAll(async () => {
    sink = createServer((req, res) => {
      let body = '';
      req.setEncoding('utf8');
      req.on('data', (c: string) => {
        body += c;
      });
      req.on('end', () => {
        got.push({ body, headers: req.headers });
        res.writeHead(200).end();
      });
    });
    await new Promise<void>((r) => sink.listen(0, '127.0.0.1', r));
    sinkUrl = `http://127.0.0.1:${(sink.address() as AddressInfo).port}/hook`;

    ref = await buildImage();
    // Admin first: it creates the spill topic; the others then find it.
    roles.admin = await runRole(ref, `spw-admin-${tag}`, 'admin', env);
    const [worker, ingest] = await Promise.all([
      runRole(ref, `spw-worker-${tag}`, 'worker', env),
      runRole(ref, `spw-ingest-${tag}`, 'ingest', env),
    ]);
    roles.worker = worker;
    roles.ingest = ingest;
    admin = `http://127.0.0.1:${roles.admin.adminPort}`;
    for (const r of Object.values(roles))
      console.log(`image ${ref}: ${r.role} ready ${Math.round(r.readyMs)} ms after podman run`);
  }, 400_000);

  afterAll(async () => {
    if (admin) await api('DELETE', `/tenants/${tenant}`).catch(() => {});
    for (const r of Object.values(roles)) await podman(['rm', '-f', '-t', '5', r.name]).catch(() => {});
    await new Promise<void>((r) => (sink ? sink.close(() => r()) : r()));
    await dropSpillTopic(env.SPILLWAY_KAFKA_BROKERS!.split(','), env.SPILLWAY_SPILL_TOPIC!);
  }, 60_000);

  it('is a non-root image whose entrypoint is `spillway start`', async () => {
    const [config] = JSON.parse(await podman(['image', 'inspect', ref])) as {
      Config: { User: string; Entrypoint: string[]; Cmd: string[] };
    }[];
    expect(config!.Config.User).toBe('10001:10001');
    expect(config!.Config.Entrypoint.slice(-2)).toEqual(['/app/packages/router/bin/spillway.mjs', 'start']);
    expect(config!.Config.Cmd).toEqual(['--role', 'all']);
    // What actually runs: the roles' processes as the host sees them.
    for (const r of Object.values(roles)) {
      const uids = uidsOf(await r.hostPid());
      expect(uids.length, r.role).toBe(4);
      for (const uid of uids) expect(uid, `${r.role} uid`).toBe(10001);
    }
  });

  it('signs with the native addon inside the image, not the node:crypto fallback', async () => {
    const out = await podman([
      'exec',
      roles.worker!.name,
      '/usr/local/bin/node',
      '-e',
      "import('/app/packages/delivery/src/sign.ts').then((m) => console.log(m.signingImplementation))",
    ]);
    expect(out.trim()).toBe('native');
  });

  it('serves /healthz, /readyz and /metrics on every role', async () => {
    for (const r of Object.values(roles)) {
      const base = `http://127.0.0.1:${r.adminPort}`;
      expect((await fetch(`${base}/healthz`)).status, r.role).toBe(200);
      const ready = await fetch(`${base}/readyz`);
      expect(ready.status, r.role).toBe(200);
      // Each role checks what it needs: only the worker uses Kafka.
      expect(await ready.json()).toMatchObject(
        r.role === 'worker' ? { redis: true, kafka: true } : { redis: true },
      );
      expect(await (await fetch(`${base}/metrics`)).text(), r.role).toMatch(/^spillway_/m);
    }
  });

  it('delivers an API event and a provider webhook through the admin, ingest and worker containers', async () => {
    expect((await api('POST', '/tenants', { id: tenant })).status).toBe(201);
    const ep = await api('POST', `/tenants/${tenant}/endpoints`, { url: sinkUrl });
    expect(ep.status).toBe(201);
    const endpointSecret = String(ep.json!.secret);
    const sourceSecret = `whsec_${randomBytes(24).toString('base64')}`;
    const src = await api('POST', `/tenants/${tenant}/sources`, { kind: 'standard', secret: sourceSecret });
    expect(src.status).toBe(201);

    const apiId = `evt-${tag}`;
    const sent = await api('POST', `/tenants/${tenant}/events`, {
      id: apiId,
      type: 'order.created',
      payload: { order: 1 },
    });
    expect(sent.status).toBe(202);

    const hookId = `msg-${tag}`;
    const body = JSON.stringify({ type: 'invoice.paid', data: { n: 2 } });
    const now = new Date();
    const signature = new Webhook(sourceSecret).sign(hookId, now, body);
    const ingested = await fetch(`http://127.0.0.1:${roles.ingest!.ingestPort}${src.json!.ingestPath}`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'webhook-id': hookId,
        'webhook-timestamp': String(Math.floor(now.getTime() / 1000)),
        'webhook-signature': signature,
      },
      body,
    });
    expect(ingested.status).toBe(202);

    await waitFor(() => got.length >= 2, 'both deliveries at the sink', 30_000);
    const byId = new Map(got.map((g) => [String(g.headers['webhook-id']), g]));
    expect([...byId.keys()].sort()).toEqual([apiId, hookId].sort());
    // Signed with the endpoint's secret, per Standard Webhooks: verify() throws otherwise.
    const verifier = new Webhook(endpointSecret);
    for (const g of byId.values()) {
      expect(() => verifier.verify(g.body, g.headers as Record<string, string>)).not.toThrow();
    }
    expect(JSON.parse(byId.get(apiId)!.body)).toEqual({ order: 1 });
    expect(byId.get(hookId)!.body).toBe(body);
    expect(byId.get(hookId)!.headers['spillway-event-type']).toBe('invoice.paid');
  });

  it('stops on SIGTERM (podman stop) with exit code 0', { timeout: 150_000 }, async () => {
    for (const name of ['worker', 'ingest'] as const) {
      const r = roles[name]!;
      await podman(['stop', '-t', '30', r.name], 60_000);
      const code = (await podman(['inspect', '--format', '{{.State.ExitCode}}', r.name])).trim();
      expect(code, `${name}: ${await r.logs()}`).toBe('0');
    }
  });
});

import { createHmac, randomBytes } from 'node:crypto';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { sign as githubSign } from '@octokit/webhooks-methods';
import { type Started, start } from '@spillway/router';
import { Webhook } from 'standardwebhooks';
import Stripe from 'stripe';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { probeUring } from '../../packages/ingest/src/backends/uring.ts';
import { testEnv } from '../helpers/env.ts';
import { sleep, waitFor } from '../helpers/wait.ts';
import { expectSignedWith } from '../helpers/webhooks.ts';

/**
 * Sources managed through the admin API, end to end (`start('all')`, each ingest backend): the
 * secrets are stored sealed and opened by the config store, so ingest verifies and the worker signs
 * with plaintext. A Shopify `orders/create` reaches the endpoints subscribed to `orders/*` and
 * `orders/create` and no other; a source secret rotated with PATCH keeps the old secret verifying
 * during the overlap for all four kinds, until the overlap is ended.
 */
interface Got {
  path: string;
  body: Buffer;
  headers: IncomingHttpHeaders;
}

const stripe = new Stripe('sk_test_x');
const backends = ['node', ...(probeUring().ok ? ['uring'] : [])] as const;

for (const backend of backends) {
  describe(`sources through the admin API (ingest backend ${backend})`, () => {
    const tenant = `src-${randomBytes(3).toString('hex')}`;
    /** Deliveries at the receiver, and each endpoint's signing secret (endpoint id = path). */
    const got: Got[] = [];
    const secrets = new Map<string, string>();
    let receiver: Server;
    let base: string;
    let sp: Started;
    let admin: string;
    let token: string;

    const api = async (method: string, path: string, body?: unknown) => {
      const res = await fetch(`${admin}/v1${path}`, {
        method,
        headers: {
          authorization: `Bearer ${token}`,
          ...(body ? { 'content-type': 'application/json' } : {}),
        },
        ...(body ? { body: JSON.stringify(body) } : {}),
      });
      const text = await res.text();
      return { status: res.status, json: text ? (JSON.parse(text) as Record<string, any>) : undefined };
    };
    const ingest = (sourceId: string, body: Buffer, headers: Record<string, string>) =>
      fetch(`http://127.0.0.1:${sp.ingestPort}/ingest/${sourceId}`, {
        method: 'POST',
        body,
        headers: { 'content-type': 'application/json', ...headers },
      }).then((r) => r.status);

    beforeAll(async () => {
      receiver = createServer((req, res) => {
        const chunks: Buffer[] = [];
        req.on('data', (c: Buffer) => chunks.push(c));
        req.on('end', () => {
          got.push({ path: req.url ?? '', body: Buffer.concat(chunks), headers: req.headers });
          res.writeHead(200).end();
        });
      });
      await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
      base = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}`;
      const env = testEnv({
        SPILLWAY_TARGET_ALLOW_CIDRS: '127.0.0.1/32',
        SPILLWAY_INGEST_BACKEND: backend,
        SPILLWAY_RETRY_SCHEDULE: '100ms,200ms',
      });
      token = env.SPILLWAY_ADMIN_TOKEN!;
      sp = await start('all', env);
      admin = `http://127.0.0.1:${sp.adminPort}`;
      expect((await api('POST', '/tenants', { id: tenant })).status).toBe(201);
      for (const [id, eventTypes] of [
        ['wild', ['orders/*']],
        ['exact', ['orders/create']],
        ['products', ['products/*']],
        ['dotted', ['orders.*']],
      ] as const) {
        const ep = await api('POST', `/tenants/${tenant}/endpoints`, {
          id,
          url: `${base}/${id}`,
          eventTypes,
        });
        expect(ep.status, JSON.stringify(ep.json)).toBe(201);
        secrets.set(id, ep.json!.secret);
      }
    }, 60_000);

    afterAll(async () => {
      await sp?.close();
      receiver?.closeAllConnections();
      await new Promise((r) => receiver?.close(r));
    });

    const shopify = (secret: string, topic = 'orders/create') => {
      const id = randomBytes(8).toString('hex');
      const body = Buffer.from(`{"id": "${id}", "email": "jon@example.com"}`);
      return {
        id,
        body,
        headers: {
          'x-shopify-hmac-sha256': createHmac('sha256', secret).update(body).digest('base64'),
          'x-shopify-topic': topic,
          'x-shopify-webhook-id': id,
        },
      };
    };

    it('a Shopify orders/create reaches the endpoints on orders/* and orders/create, signed with their own secrets', async () => {
      const src = await api('POST', `/tenants/${tenant}/sources`, { kind: 'shopify', secret: 'shop-1' });
      expect(src.status).toBe(201);
      const req = shopify('shop-1');
      expect(await ingest(src.json!.id, req.body, req.headers)).toBe(202);
      const arrived = (await waitFor(
        () => {
          const hits = got.filter((g) => g.headers['webhook-id'] === req.id);
          return hits.length >= 2 ? hits : undefined;
        },
        'orders/create at wild and exact',
        30_000,
      ))!;
      expect(arrived.map((g) => g.path).sort()).toEqual(['/exact', '/wild']);
      for (const g of arrived) {
        expect(g.body.equals(req.body)).toBe(true);
        expect(g.headers['spillway-event-type']).toBe('orders/create');
        // The worker signed with the endpoint's plaintext secret (opened by the config store).
        expectSignedWith(secrets.get(g.path.slice(1))!, g);
      }
      // products/* and orders.* do not match orders/create (deliberate pause: a delivery would show).
      await sleep(500);
      expect(got.filter((g) => g.headers['webhook-id'] === req.id)).toHaveLength(2);
    });

    it('a rotated source secret: old and new both verify during the overlap, for every kind; ending it refuses the old', async () => {
      const kinds = {
        github: {
          secrets: ['gh-old', 'gh-new'],
          sign: async (secret: string) => {
            const id = randomBytes(8).toString('hex');
            // Distinct bodies: github and shopify bodies are also deduplicated on their hash.
            const body = Buffer.from(`{"action":"opened","n":"${id}"}`);
            return {
              body,
              headers: {
                'x-hub-signature-256': await githubSign(secret, body.toString()),
                'x-github-event': 'pull_request',
                'x-github-delivery': id,
              },
            };
          },
        },
        stripe: {
          secrets: [
            `whsec_${randomBytes(24).toString('base64')}`,
            `whsec_${randomBytes(24).toString('base64')}`,
          ],
          sign: async (secret: string) => {
            const body = Buffer.from(`{"id":"evt_${randomBytes(6).toString('hex')}","type":"invoice.paid"}`);
            return {
              body,
              headers: {
                'stripe-signature': stripe.webhooks.generateTestHeaderString({
                  payload: body.toString(),
                  secret,
                }),
              },
            };
          },
        },
        shopify: {
          secrets: ['shop-old', 'shop-new'],
          sign: async (secret: string) => shopify(secret),
        },
        standard: {
          secrets: [
            `whsec_${randomBytes(24).toString('base64')}`,
            `whsec_${randomBytes(24).toString('base64')}`,
          ],
          sign: async (secret: string) => {
            const id = `msg_${randomBytes(8).toString('hex')}`;
            const body = Buffer.from('{"type":"user.created"}');
            const now = new Date();
            return {
              body,
              headers: {
                'webhook-id': id,
                'webhook-timestamp': String(Math.floor(now.getTime() / 1000)),
                'webhook-signature': new Webhook(secret).sign(id, now, body),
              },
            };
          },
        },
      };
      for (const [kind, k] of Object.entries(kinds)) {
        const [oldSecret, newSecret] = k.secrets as [string, string];
        const src = await api('POST', `/tenants/${tenant}/sources`, { kind, secret: oldSecret });
        expect(src.status, kind).toBe(201);
        const sid = src.json!.id as string;
        const post = async (secret: string) => {
          const r = await k.sign(secret);
          return ingest(sid, r.body, r.headers);
        };
        expect(await post(oldSecret), kind).toBe(202);
        expect(await post(newSecret), kind).toBe(401);

        const p = await api('PATCH', `/tenants/${tenant}/sources/${sid}`, { secret: newSecret });
        expect(p.status, kind).toBe(200);
        // The change reaches ingest's source cache (published on Redis; at worst its 500 ms TTL).
        await waitFor(async () => (await post(newSecret)) === 202, `${kind}: the new secret to verify`, 5000);
        expect(await post(oldSecret), `${kind}: the old secret during the overlap`).toBe(202);

        // Ending the overlap (overlap 0 with the current secret): only the new one verifies.
        const cut = await api('PATCH', `/tenants/${tenant}/sources/${sid}`, {
          secret: newSecret,
          secretOverlapSeconds: 0,
        });
        expect(cut.status, kind).toBe(200);
        await waitFor(
          async () => (await post(oldSecret)) === 401,
          `${kind}: the old secret to be refused`,
          5000,
        );
        expect(await post(newSecret), kind).toBe(202);
      }
    }, 60_000);
  });
}

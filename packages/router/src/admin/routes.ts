import { randomBytes } from 'node:crypto';
import { ed25519PublicPem, generateSecret, rotateSecret } from '@spillway/delivery';
import {
  type Endpoint,
  errors,
  isSealed,
  type Rate,
  type Source,
  type SourceKind,
  type Tenant,
  whsecProblem,
} from '@spillway/shared';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import ipaddr from 'ipaddr.js';
import type { ConfigStore } from '../config/store.ts';
import type { ApiKeys } from './auth.ts';
import { applyOptions, type OptionsBody, publicEndpoint, publicKeySchema } from './endpoint-options.ts';
import type { EventAdmission } from './quota.ts';
import * as s from './schemas.ts';
import type { RouterServices } from './services.ts';

export interface AdminDeps {
  store: ConfigStore;
  apiKeys: ApiKeys;
  services: RouterServices;
  /** The events API's per-tenant rate and daily quota (./quota.ts). */
  admission: EventAdmission;
}

/** Route option `config.tenantKey`: a tenant API key may call this route for its own tenant. */
declare module 'fastify' {
  interface FastifyContextConfig {
    tenantKey?: boolean;
  }
}

export const TENANT_DEFAULT_LIMITS = { maxInFlight: 1000, concurrency: 16 } as const;
export const ENDPOINT_DEFAULT_TIMEOUT_MS = 15_000;
export const SOURCE_DEFAULT_MAX_BODY = 1_048_576;
/** How long a replaced endpoint secret keeps signing, so receivers can roll over. */
const SECRET_OVERLAP_MS = 24 * 3600_000;

const newId = (prefix: string) =>
  `${prefix}_${randomBytes(9)
    .toString('base64url')
    .replace(/[^A-Za-z0-9]/g, 'x')}`;

export type P<K extends string> = { [k in K]: string };

function checkUrl(raw: string): string {
  let u: URL;
  try {
    u = new URL(raw);
  } catch {
    throw errors.invalidBody(`body/url must be an absolute http:// or https:// URL`);
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:')
    throw errors.invalidBody(`body/url must use http or https (got ${u.protocol})`);
  if (!u.hostname) throw errors.invalidBody('body/url must name a host');
  // Credentials in the URL would be stored and shown in plain text (and undici drops them).
  if (u.username || u.password)
    throw errors.invalidBody(
      'body/url must not carry credentials (user:pass@host): give them as "auth": {"type":"basic","username":…,"password":…}, stored encrypted with the endpoint’s secrets',
    );
  return u.toString();
}

export function checkCidrs(list: string[] | undefined): string[] | undefined {
  if (list === undefined) return undefined;
  return list.map((c, i) => {
    try {
      const [addr, bits] = ipaddr.parseCIDR(c);
      return `${addr.toString()}/${bits}`;
    } catch {
      throw errors.invalidBody(
        `body/allowCidrs/${i} is not a CIDR like 192.30.252.0/22 or 2001:db8::/32 (got "${c}")`,
      );
    }
  });
}

export function checkSourceSecret(kind: SourceKind, secret: string): void {
  // The stored form of a sealed secret (secret-box.ts): taken as a secret, it would be read as one.
  if (isSealed(secret)) throw errors.invalidBody('body/secret must not start with "enc:"');
  // Standard Webhooks keys are the base64 part of whsec_... (the shared rule the verifier decodes
  // with too); anything else could never verify.
  if (kind === 'standard') {
    const problem = whsecProblem(secret, 'body/secret for kind standard');
    if (problem) throw errors.invalidBody(problem);
  }
}

/** Bodies that are optional as a whole: no body at all means `{}` (then validated as usual). */
export async function emptyBodyIsObject(req: FastifyRequest): Promise<void> {
  if (req.body === undefined || req.body === null) req.body = {};
}

/**
 * What GET and list show of a record with secrets: everything but the secrets (a rotation in
 * progress shows when each replaced secret stops). The secrets are in the create answer and behind
 * GET .../secret (./routes-secrets.ts).
 */
function withoutSecrets<T extends Pick<Endpoint, 'secret' | 'previousSecrets'>>(v: T) {
  const { secret: _secret, previousSecrets, ...rest } = v;
  return previousSecrets?.length
    ? { ...rest, previousSecrets: previousSecrets.map((p) => ({ expiresAt: p.expiresAt })) }
    : rest;
}

/** An endpoint as GET and list show it: no secrets, no credentials, no private key (./endpoint-options.ts). */
export const endpointView = (ep: Endpoint) => withoutSecrets(publicEndpoint(ep));
export const sourceView = (src: Source) => ({ ...withoutSecrets(src), ingestPath: `/ingest/${src.id}` });

/** A route's request schemas and its success responses (documented in /openapi.json). */
interface RouteSchema {
  params?: object;
  querystring?: object;
  body?: object;
  response: Record<number, object>;
}

/**
 * Route options: the OpenAPI tag, the schemas, the error statuses the route can answer (the shared
 * error body, see ./schemas.ts errorsFor) and route config (`tenantKey`) or hooks.
 */
export function spec(
  tag: string,
  schema: RouteSchema,
  errorStatuses: number[],
  extra: { config?: { tenantKey?: boolean }; preValidation?: typeof emptyBodyIsObject } = {},
) {
  return {
    ...extra,
    schema: { tags: [tag], ...schema, response: { ...schema.response, ...s.errorsFor(...errorStatuses) } },
  };
}

/** spec() of a route a tenant's own API key may call, not only the admin token (`tenantKey`). */
export const tenantKeySpec = (tag: string, schema: RouteSchema, errorStatuses: number[]) =>
  spec(tag, schema, errorStatuses, { config: { tenantKey: true } });

/** The answers of an idempotent POST: 202 when new, 200 with what the first of its repeats did. */
export const acceptedOrRepeated = (accepted: string, repeated: string, item: object) => ({
  202: { description: accepted, ...item },
  200: { description: repeated, ...item },
});

/** POST creating something of a tenant: 201 with it, 404 for an unknown tenant, 409 for a taken id. */
const createdUnderTenant = (tag: string, body: object, item: object) =>
  spec(tag, { params: s.tidParams, body, response: { 201: item } }, [400, 401, 404, 409]);

/** PATCH answering 200 with the updated item. */
export const updated = (tag: string, params: object, body: object, item: object) =>
  spec(tag, { params, body, response: { 200: item } }, [400, 401, 404]);

/** Every /v1 route. Registered under the `/v1` prefix by ./index.ts (auth and errors live there). */
export function registerRoutes(app: FastifyInstance, d: AdminDeps): void {
  const { store, apiKeys } = d;

  /** GET of a tenant's collection: 404 for an unknown tenant, else `{ data }`. */
  const listRoute = (
    path: string,
    tag: string,
    item: object,
    load: (tenantId: string) => Promise<unknown[]>,
  ) =>
    app.get<{ Params: P<'tid'> }>(
      path,
      spec(tag, { params: s.tidParams, response: { 200: s.list(item) } }, [400, 401, 404]),
      async (req) => {
        await store.requireTenant(req.params.tid);
        return { data: await load(req.params.tid) };
      },
    );

  /** GET of one of a tenant's endpoints or sources, answered with `load`'s view. */
  const ONE = {
    endpoints: {
      path: '/tenants/:tid/endpoints/:eid',
      params: s.tidEidParams,
      item: s.endpointSchema,
      key: 'eid',
    },
    sources: { path: '/tenants/:tid/sources/:sid', params: s.tidSidParams, item: s.sourceSchema, key: 'sid' },
  } as const;
  const oneRoute = (tag: keyof typeof ONE, load: (tenantId: string, id: string) => Promise<unknown>) => {
    const r = ONE[tag];
    app.get<{ Params: Record<string, string> }>(
      r.path,
      spec(tag, { params: r.params, response: { 200: r.item } }, [400, 401, 404]),
      async (req) => {
        await store.requireTenant(req.params.tid!);
        return load(req.params.tid!, req.params[r.key]!);
      },
    );
  };

  /**
   * DELETE answering 204 with no body; `remove` throws not_found for what does not exist. With
   * `tenantFirst` an unknown tenant is a 404 before anything is looked up.
   */
  const deleteRoute = <K extends string>(
    path: string,
    tag: string,
    params: object,
    remove: (p: P<K>) => Promise<unknown>,
    { done = 'deleted', tenantFirst = true } = {},
  ) =>
    app.delete<{ Params: P<K> }>(
      path,
      spec(tag, { params, response: { 204: { description: done, type: 'null' } } }, [400, 401, 404]),
      async (req, reply) => {
        const p = req.params as P<K> & P<'tid'>;
        if (tenantFirst) await store.requireTenant(p.tid);
        await remove(p);
        return reply.code(204).send();
      },
    );

  // --- tenants -------------------------------------------------------------------------------
  type LimitsBody = Partial<Tenant['limits']>;
  app.post<{ Body: { id?: string; limits?: LimitsBody } }>(
    '/tenants',
    spec('tenants', { body: s.createTenantBody, response: { 201: s.tenantSchema } }, [400, 401, 409]),
    async (req, reply) => {
      const b = req.body;
      const tenant: Tenant = {
        id: b.id ?? newId('tn'),
        limits: {
          maxInFlight: b.limits?.maxInFlight ?? TENANT_DEFAULT_LIMITS.maxInFlight,
          concurrency: b.limits?.concurrency ?? TENANT_DEFAULT_LIMITS.concurrency,
          ...(b.limits?.rate ? { rate: b.limits.rate } : {}),
          ...(b.limits?.eventsPerDay ? { eventsPerDay: b.limits.eventsPerDay } : {}),
          ...(b.limits?.eventRate ? { eventRate: b.limits.eventRate } : {}),
        },
        status: 'active',
        createdAt: new Date().toISOString(),
      };
      return reply.code(201).send(await store.createTenant(tenant));
    },
  );

  app.get('/tenants', spec('tenants', { response: { 200: s.list(s.tenantSchema) } }, [401]), async () => ({
    data: await store.listTenants(),
  }));

  app.get<{ Params: P<'tid'> }>(
    '/tenants/:tid',
    spec('tenants', { params: s.tidParams, response: { 200: s.tenantSchema } }, [400, 401, 404]),
    async (req) => store.requireTenant(req.params.tid),
  );

  app.patch<{
    Params: P<'tid'>;
    Body: {
      limits: {
        maxInFlight?: number;
        concurrency?: number;
        rate?: Rate | null;
        eventsPerDay?: number | null;
        eventRate?: Rate | null;
      };
    };
  }>('/tenants/:tid', updated('tenants', s.tidParams, s.patchTenantBody, s.tenantSchema), async (req) =>
    store.updateTenant(req.params.tid, (t) => {
      const l = req.body.limits;
      const limits = {
        ...t.limits,
        ...(l.maxInFlight ? { maxInFlight: l.maxInFlight } : {}),
        ...(l.concurrency ? { concurrency: l.concurrency } : {}),
      };
      if (l.rate === null) delete limits.rate;
      else if (l.rate) limits.rate = l.rate;
      // null: back to the configured default.
      if (l.eventsPerDay === null) delete limits.eventsPerDay;
      else if (l.eventsPerDay) limits.eventsPerDay = l.eventsPerDay;
      if (l.eventRate === null) delete limits.eventRate;
      else if (l.eventRate) limits.eventRate = l.eventRate;
      return { ...t, limits };
    }),
  );

  deleteRoute<'tid'>(
    '/tenants/:tid',
    'tenants',
    s.tidParams,
    async (p) => {
      await store.deleteTenant(p.tid);
      await apiKeys.revokeAll(p.tid);
    },
    { tenantFirst: false },
  );

  for (const [action, status] of [
    ['pause', 'paused'],
    ['resume', 'active'],
  ] as const) {
    app.post<{ Params: P<'tid'> }>(
      `/tenants/:tid/${action}`,
      spec('tenants', { params: s.tidParams, response: { 200: s.statusSchema } }, [400, 401, 404]),
      async (req) => {
        // updateTenant publishes the change; every worker's ConfigCache drops the tenant at once.
        const t = await store.updateTenant(req.params.tid, (cur) => ({ ...cur, status }));
        return { id: t.id, status: t.status };
      },
    );
  }

  app.get<{ Params: P<'tid'>; Querystring: { detail?: 'workers' } }>(
    '/tenants/:tid/stats',
    tenantKeySpec(
      'tenants',
      { params: s.tidParams, querystring: s.statsQuery, response: { 200: s.statsSchema } },
      [400, 401, 403, 404, 503],
    ),
    async (req) => {
      const t = await store.requireTenant(req.params.tid);
      const stats = await d.services.tenantStats(t.id, { detail: req.query.detail === 'workers' });
      // The tenant record is the truth for status (stats may lag by a heartbeat).
      return { ...stats, status: t.status };
    },
  );

  // --- tenant API keys -----------------------------------------------------------------------
  app.post<{ Params: P<'tid'>; Body: { name?: string } | undefined }>(
    '/tenants/:tid/keys',
    spec(
      'keys',
      { params: s.tidParams, body: s.createApiKeyBody, response: { 201: s.apiKeySchema } },
      [400, 401, 404],
      { preValidation: emptyBodyIsObject },
    ),
    async (req, reply) => {
      await store.requireTenant(req.params.tid);
      const { record, key } = await apiKeys.create(req.params.tid, req.body?.name);
      return reply.code(201).send({ ...record, key });
    },
  );

  listRoute('/tenants/:tid/keys', 'keys', s.apiKeySchema, (tenantId) => apiKeys.list(tenantId));

  deleteRoute<'tid' | 'kid'>(
    '/tenants/:tid/keys/:kid',
    'keys',
    s.tidKidParams,
    (p) => apiKeys.revoke(p.tid, p.kid),
    {
      done: 'revoked',
      tenantFirst: false,
    },
  );

  // --- endpoints -----------------------------------------------------------------------------
  type EndpointBody = Pick<Endpoint, 'url'> &
    Partial<Pick<Endpoint, 'id' | 'eventTypes' | 'secret' | 'rate' | 'timeoutMs'>> &
    OptionsBody;
  app.post<{ Params: P<'tid'>; Body: EndpointBody }>(
    '/tenants/:tid/endpoints',
    createdUnderTenant('endpoints', s.createEndpointBody, s.createdEndpointSchema),
    async (req, reply) => {
      const b = req.body;
      const ep = applyOptions(
        {
          id: b.id ?? newId('ep'),
          tenantId: req.params.tid,
          url: checkUrl(b.url),
          eventTypes: b.eventTypes ?? ['*'],
          secret: b.secret ?? generateSecret(),
          ...(b.rate ? { rate: b.rate } : {}),
          timeoutMs: b.timeoutMs ?? ENDPOINT_DEFAULT_TIMEOUT_MS,
          status: 'active',
          createdAt: new Date().toISOString(),
        },
        b,
      );
      return reply.code(201).send(publicEndpoint(await store.createEndpoint(ep)));
    },
  );

  listRoute('/tenants/:tid/endpoints', 'endpoints', s.endpointSchema, async (tenantId) =>
    (await store.listEndpoints(tenantId)).map(endpointView),
  );

  oneRoute('endpoints', async (tid, eid) => endpointView(await store.requireEndpoint(tid, eid)));

  app.get<{ Params: P<'tid' | 'eid'> }>(
    '/tenants/:tid/endpoints/:eid/public-key',
    spec(
      'endpoints',
      {
        params: s.tidEidParams,
        response: {
          200: { description: 'the key receivers verify v1a signatures with', ...publicKeySchema },
        },
      },
      [400, 401, 403, 404],
      { config: { tenantKey: true } },
    ),
    async (req) => {
      await store.requireTenant(req.params.tid);
      const ep = await store.requireEndpoint(req.params.tid, req.params.eid);
      if (!ep.ed25519)
        throw errors.notFound(
          `endpoint ${ep.id} has no Ed25519 key: PATCH it with "signatures": ["v1","v1a"] (or ["v1a"]) to create one`,
        );
      return {
        endpointId: ep.id,
        algorithm: 'ed25519',
        publicKey: ep.ed25519.publicKey,
        publicKeyPem: ed25519PublicPem(ep.ed25519.publicKey),
        createdAt: ep.ed25519.createdAt,
      };
    },
  );

  app.patch<{
    Params: P<'tid' | 'eid'>;
    Body: Partial<Omit<EndpointBody, 'id' | 'rate'>> & { rate?: Rate | null };
  }>(
    '/tenants/:tid/endpoints/:eid',
    updated('endpoints', s.tidEidParams, s.patchEndpointBody, s.endpointSchema),
    async (req) => {
      const b = req.body;
      const url = b.url === undefined ? undefined : checkUrl(b.url);
      await store.requireTenant(req.params.tid);
      const ep = await store.updateEndpoint(req.params.tid, req.params.eid, (cur) => {
        const next = applyOptions(cur, b);
        if (url) next.url = url;
        if (b.eventTypes) next.eventTypes = b.eventTypes;
        if (b.timeoutMs) next.timeoutMs = b.timeoutMs;
        if (b.rate === null) delete next.rate;
        else if (b.rate) next.rate = b.rate;
        // Rotation: the old secret keeps signing alongside the new one for a day.
        if (b.secret && b.secret !== cur.secret)
          Object.assign(next, rotateSecret(cur, SECRET_OVERLAP_MS, b.secret));
        return next;
      });
      return endpointView(ep);
    },
  );

  // Deleting an endpoint is the one explicit discard (with its tenant's): its dead letters go with
  // it, counted, so an endpoint created again under the same id starts with an empty DLQ (its
  // other tasks are discarded by incarnation wherever a worker meets them).
  deleteRoute<'tid' | 'eid'>('/tenants/:tid/endpoints/:eid', 'endpoints', s.tidEidParams, async (p) => {
    await store.deleteEndpoint(p.tid, p.eid);
    await d.services.purgeDlq(p.tid, { endpointId: p.eid });
  });

  for (const [action, status] of [
    ['pause', 'paused'],
    ['resume', 'active'],
  ] as const) {
    app.post<{ Params: P<'tid' | 'eid'> }>(
      `/tenants/:tid/endpoints/:eid/${action}`,
      spec(
        'endpoints',
        { params: s.tidEidParams, response: { 200: s.endpointStatusSchema } },
        [400, 401, 404],
      ),
      async (req) => {
        await store.requireTenant(req.params.tid);
        const ep = await store.updateEndpoint(req.params.tid, req.params.eid, (cur) => {
          const next: Endpoint = { ...cur, status };
          // Resuming is also how an operator re-enables an endpoint that was disabled (e.g. 410).
          if (status === 'active') {
            delete next.disabledReason;
            delete next.disabledAt;
          }
          return next;
        });
        return { id: ep.id, status: ep.status };
      },
    );
  }

  // --- sources -------------------------------------------------------------------------------
  type SourceBody = Pick<Source, 'kind' | 'secret'> &
    Partial<Pick<Source, 'id' | 'allowCidrs' | 'maxBodyBytes' | 'rate'>>;
  app.post<{ Params: P<'tid'>; Body: SourceBody }>(
    '/tenants/:tid/sources',
    createdUnderTenant('sources', s.createSourceBody, s.createdSourceSchema),
    async (req, reply) => {
      const b = req.body;
      checkSourceSecret(b.kind, b.secret);
      const allowCidrs = checkCidrs(b.allowCidrs);
      const src: Source = {
        id: b.id ?? newId('src'),
        tenantId: req.params.tid,
        kind: b.kind,
        secret: b.secret,
        ...(allowCidrs ? { allowCidrs } : {}),
        maxBodyBytes: b.maxBodyBytes ?? SOURCE_DEFAULT_MAX_BODY,
        ...(b.rate ? { rate: b.rate } : {}),
        createdAt: new Date().toISOString(),
      };
      const created = await store.createSource(src);
      return reply.code(201).send({ ...sourceView(created), secret: created.secret });
    },
  );

  listRoute('/tenants/:tid/sources', 'sources', s.sourceSchema, async (tenantId) =>
    (await store.listSources(tenantId)).map(sourceView),
  );

  // Sources live in one global hash: another tenant's source is "not found" here, not a leak.
  oneRoute('sources', async (tid, sid) => sourceView(await store.requireSource(tid, sid)));

  deleteRoute<'tid' | 'sid'>('/tenants/:tid/sources/:sid', 'sources', s.tidSidParams, (p) =>
    store.deleteSource(p.tid, p.sid),
  );

  // --- events --------------------------------------------------------------------------------
  app.post<{ Params: P<'tid'>; Body: { id?: string; type: string; payload: unknown; orderingKey?: string } }>(
    '/tenants/:tid/events',
    tenantKeySpec(
      'events',
      {
        params: s.tidParams,
        body: s.createEventBody,
        response: acceptedOrRepeated(
          'accepted and durable',
          'seen within the dedup window; not delivered again',
          s.eventAcceptedSchema,
        ),
      },
      [400, 401, 403, 404, 413, 429, 503],
    ),
    async (req, reply) => {
      const services = d.services;
      const tenant = await store.requireTenant(req.params.tid);
      const admitted = await d.admission.admit(tenant);
      let r: { id: string; duplicate: boolean };
      try {
        r = await services.intake.submit({
          tenantId: req.params.tid,
          id: req.body.id ?? newId('evt'),
          type: req.body.type,
          receivedAt: Date.now(),
          contentType: 'application/json',
          body: Buffer.from(JSON.stringify(req.body.payload)),
          ...(req.body.orderingKey === undefined ? {} : { orderingKey: req.body.orderingKey }),
        });
      } catch (err) {
        await admitted.refund().catch(() => {});
        throw err;
      }
      // A duplicate adds nothing to Redis: it does not count against the quota.
      if (r.duplicate) await admitted.refund().catch(() => {});
      return r.duplicate
        ? reply.code(200).send({ id: r.id, duplicate: true })
        : reply.code(202).send({ id: r.id });
    },
  );

  app.get<{ Params: P<'tid' | 'eid'> }>(
    '/tenants/:tid/events/:eid',
    tenantKeySpec(
      'events',
      { params: s.tidEidParams, response: { 200: s.eventSchema } },
      [400, 401, 403, 404, 503],
    ),
    async (req) => {
      const services = d.services;
      await store.requireTenant(req.params.tid);
      const ev = await services.getEvent(req.params.tid, req.params.eid);
      if (!ev) throw errors.notFound(`event ${req.params.eid} not found`);
      return ev;
    },
  );

  // --- dead letters --------------------------------------------------------------------------
  app.get<{ Params: P<'tid'>; Querystring: { endpointId?: string; limit?: string; cursor?: string } }>(
    '/tenants/:tid/dlq',
    spec(
      'dlq',
      { params: s.tidParams, querystring: s.dlqQuery, response: { 200: s.dlqPageSchema } },
      [400, 401, 404, 503],
    ),
    async (req) => {
      const services = d.services;
      await store.requireTenant(req.params.tid);
      const limit = Math.min(Number(req.query.limit ?? 100), 1000);
      return services.pageDlq(req.params.tid, {
        ...(req.query.endpointId ? { endpointId: req.query.endpointId } : {}),
        from: Number(req.query.cursor ?? 0),
        limit,
      });
    },
  );

  app.post<{ Params: P<'tid'>; Body: { endpointId?: string } | undefined }>(
    '/tenants/:tid/dlq/replay',
    spec(
      'dlq',
      { params: s.tidParams, body: s.replayBody, response: { 202: s.replaySchema } },
      [400, 401, 404, 503],
      { preValidation: emptyBodyIsObject },
    ),
    async (req, reply) => {
      const services = d.services;
      await store.requireTenant(req.params.tid);
      const endpointId = req.body?.endpointId;
      if (endpointId) await store.requireEndpoint(req.params.tid, endpointId);
      const replayed = await services.replayDlq(req.params.tid, endpointId ? { endpointId } : {});
      return reply.code(202).send({ replayed });
    },
  );
}

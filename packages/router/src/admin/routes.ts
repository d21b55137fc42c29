import { randomBytes } from 'node:crypto';
import { generateSecret, rotateSecret } from '@spillway/delivery';
import {
  type Endpoint,
  errors,
  parseWhsec,
  type Rate,
  type Source,
  type SourceKind,
  type Tenant,
} from '@spillway/shared';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import ipaddr from 'ipaddr.js';
import type { ConfigStore } from '../config/store.ts';
import type { ApiKeys } from './auth.ts';
import * as s from './schemas.ts';
import type { RouterServices } from './services.ts';

export interface AdminDeps {
  store: ConfigStore;
  apiKeys: ApiKeys;
  services: RouterServices;
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

type P<K extends string> = { [k in K]: string };

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
  return u.toString();
}

function checkCidrs(list: string[] | undefined): string[] | undefined {
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

function checkSourceSecret(kind: SourceKind, secret: string): void {
  // Standard Webhooks keys are the base64 part of whsec_... (parseWhsec, the verifier's rule too);
  // anything else could never verify.
  if (kind === 'standard') {
    const key = parseWhsec(secret);
    if (!key || key.length < 16) {
      throw errors.invalidBody('body/secret for kind standard must be whsec_ + base64 of at least 16 bytes');
    }
  }
}

/** Bodies that are optional as a whole: no body at all means `{}` (then validated as usual). */
async function emptyBodyIsObject(req: FastifyRequest): Promise<void> {
  if (req.body === undefined || req.body === null) req.body = {};
}

const withIngestPath = (src: Source) => ({ ...src, ingestPath: `/ingest/${src.id}` });

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
function spec(
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

/** POST creating something of a tenant: 201 with it, 404 for an unknown tenant, 409 for a taken id. */
const createdUnderTenant = (tag: string, body: object, item: object) =>
  spec(tag, { params: s.tidParams, body, response: { 201: item } }, [400, 401, 404, 409]);

/** PATCH answering 200 with the updated item. */
const updated = (tag: string, params: object, body: object, item: object) =>
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
  app.post<{ Body: { id?: string; limits?: { maxInFlight?: number; concurrency?: number; rate?: Rate } } }>(
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
    Body: { limits: { maxInFlight?: number; concurrency?: number; rate?: Rate | null } };
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
    spec(
      'tenants',
      { params: s.tidParams, querystring: s.statsQuery, response: { 200: s.statsSchema } },
      [400, 401, 403, 404, 503],
      { config: { tenantKey: true } },
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
    Partial<Pick<Endpoint, 'id' | 'eventTypes' | 'secret' | 'rate' | 'timeoutMs'>>;
  app.post<{ Params: P<'tid'>; Body: EndpointBody }>(
    '/tenants/:tid/endpoints',
    createdUnderTenant('endpoints', s.createEndpointBody, s.endpointSchema),
    async (req, reply) => {
      const b = req.body;
      const ep: Endpoint = {
        id: b.id ?? newId('ep'),
        tenantId: req.params.tid,
        url: checkUrl(b.url),
        eventTypes: b.eventTypes ?? ['*'],
        secret: b.secret ?? generateSecret(),
        ...(b.rate ? { rate: b.rate } : {}),
        timeoutMs: b.timeoutMs ?? ENDPOINT_DEFAULT_TIMEOUT_MS,
        status: 'active',
        createdAt: new Date().toISOString(),
      };
      return reply.code(201).send(await store.createEndpoint(ep));
    },
  );

  listRoute('/tenants/:tid/endpoints', 'endpoints', s.endpointSchema, (tenantId) =>
    store.listEndpoints(tenantId),
  );

  app.get<{ Params: P<'tid' | 'eid'> }>(
    '/tenants/:tid/endpoints/:eid',
    spec('endpoints', { params: s.tidEidParams, response: { 200: s.endpointSchema } }, [400, 401, 404]),
    async (req) => {
      await store.requireTenant(req.params.tid);
      return store.requireEndpoint(req.params.tid, req.params.eid);
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
      return store.updateEndpoint(req.params.tid, req.params.eid, (ep) => {
        const next: Endpoint = { ...ep };
        if (url) next.url = url;
        if (b.eventTypes) next.eventTypes = b.eventTypes;
        if (b.timeoutMs) next.timeoutMs = b.timeoutMs;
        if (b.rate === null) delete next.rate;
        else if (b.rate) next.rate = b.rate;
        // Rotation: the old secret keeps signing alongside the new one for a day.
        if (b.secret && b.secret !== ep.secret)
          Object.assign(next, rotateSecret(ep, SECRET_OVERLAP_MS, b.secret));
        return next;
      });
    },
  );

  deleteRoute<'tid' | 'eid'>('/tenants/:tid/endpoints/:eid', 'endpoints', s.tidEidParams, (p) =>
    store.deleteEndpoint(p.tid, p.eid),
  );

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
          if (status === 'active') delete next.disabledReason;
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
    createdUnderTenant('sources', s.createSourceBody, s.sourceSchema),
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
      return reply.code(201).send(withIngestPath(await store.createSource(src)));
    },
  );

  listRoute('/tenants/:tid/sources', 'sources', s.sourceSchema, async (tenantId) =>
    (await store.listSources(tenantId)).map(withIngestPath),
  );

  app.get<{ Params: P<'tid' | 'sid'> }>(
    '/tenants/:tid/sources/:sid',
    spec('sources', { params: s.tidSidParams, response: { 200: s.sourceSchema } }, [400, 401, 404]),
    async (req) => {
      await store.requireTenant(req.params.tid);
      const src = await store.getSource(req.params.sid);
      // Sources live in one global hash: another tenant's source is "not found" here, not a leak.
      if (!src || src.tenantId !== req.params.tid)
        throw errors.notFound(`source ${req.params.sid} not found`);
      return withIngestPath(src);
    },
  );

  deleteRoute<'tid' | 'sid'>('/tenants/:tid/sources/:sid', 'sources', s.tidSidParams, (p) =>
    store.deleteSource(p.tid, p.sid),
  );

  // --- events --------------------------------------------------------------------------------
  app.post<{ Params: P<'tid'>; Body: { id?: string; type: string; payload: unknown } }>(
    '/tenants/:tid/events',
    spec(
      'events',
      {
        params: s.tidParams,
        body: s.createEventBody,
        response: {
          202: { description: 'accepted and durable', ...s.eventAcceptedSchema },
          200: { description: 'seen within the dedup window; not delivered again', ...s.eventAcceptedSchema },
        },
      },
      [400, 401, 403, 404, 413, 503],
      { config: { tenantKey: true } },
    ),
    async (req, reply) => {
      const services = d.services;
      await store.requireTenant(req.params.tid);
      const r = await services.intake.submit({
        tenantId: req.params.tid,
        id: req.body.id ?? newId('evt'),
        type: req.body.type,
        receivedAt: Date.now(),
        contentType: 'application/json',
        body: Buffer.from(JSON.stringify(req.body.payload)),
      });
      return r.duplicate
        ? reply.code(200).send({ id: r.id, duplicate: true })
        : reply.code(202).send({ id: r.id });
    },
  );

  app.get<{ Params: P<'tid' | 'eid'> }>(
    '/tenants/:tid/events/:eid',
    spec('events', { params: s.tidEidParams, response: { 200: s.eventSchema } }, [400, 401, 403, 404, 503], {
      config: { tenantKey: true },
    }),
    async (req) => {
      const services = d.services;
      await store.requireTenant(req.params.tid);
      const ev = await services.getEvent(req.params.tid, req.params.eid);
      if (!ev) throw errors.notFound(`event ${req.params.eid} not found`);
      return ev;
    },
  );

  // --- dead letters --------------------------------------------------------------------------
  app.get<{ Params: P<'tid'>; Querystring: { endpointId?: string; limit?: string } }>(
    '/tenants/:tid/dlq',
    spec(
      'dlq',
      { params: s.tidParams, querystring: s.dlqQuery, response: { 200: s.list(s.dlqEntrySchema) } },
      [400, 401, 404, 503],
    ),
    async (req) => {
      const services = d.services;
      await store.requireTenant(req.params.tid);
      const limit = Math.min(Number(req.query.limit ?? 100), 1000);
      return {
        data: await services.listDlq(req.params.tid, {
          ...(req.query.endpointId ? { endpointId: req.query.endpointId } : {}),
          limit,
        }),
      };
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

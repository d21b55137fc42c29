import { createQueue, type DeliveryStatus, errors } from '@spillway/shared';
import type { Queue } from 'bullmq';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Runtime } from '../roles/runtime.ts';
import { Operations } from './operations.ts';
import {
  type AdminDeps,
  acceptedOrRepeated,
  emptyBodyIsObject,
  type P,
  spec,
  tenantKeySpec,
} from './routes.ts';
import * as s from './schemas.ts';
import * as h from './schemas-history.ts';
import { TestSender } from './test-send.ts';

/** `since`/`until`: ISO-8601 or unix milliseconds. */
function parseTime(name: string, v: string | undefined): number | undefined {
  if (v === undefined) return undefined;
  const ms = /^\d{10,16}$/.test(v) ? Number(v) : Date.parse(v);
  if (!Number.isFinite(ms))
    throw errors.invalidRequest(`querystring/${name} must be ISO-8601 or unix milliseconds`);
  return ms;
}

const limitOf = (v: string | undefined) => Math.min(Number(v ?? 50), 100);

/** The answers of a resend or recover: the new operation, or the one this request id started. */
const operationStarted = (accepted: string) =>
  acceptedOrRepeated(accepted, 'this request id was used before: that operation', h.operationSchema);

/** The request id of an idempotent POST: the Idempotency-Key header, else the body's requestId. */
function requestIdOf(req: FastifyRequest, body: { requestId?: string } | undefined): string | undefined {
  const header = req.headers['idempotency-key'];
  const v = Array.isArray(header) ? header[0] : header;
  if (v !== undefined && !/^[A-Za-z0-9_.:-]{1,100}$/.test(v))
    throw errors.invalidRequest('Idempotency-Key must be 1-100 of A-Z a-z 0-9 _ . : -');
  if (v !== undefined && body?.requestId !== undefined && body.requestId !== v)
    throw errors.invalidBody('body/requestId differs from the Idempotency-Key header');
  return v ?? body?.requestId;
}

/**
 * The history routes: event log, attempts, resend, recover, operations, test send
 * (docs/operations.md "History", docs/storage.md). Registered under /v1 by ./index.ts.
 */
export function registerHistoryRoutes(app: FastifyInstance, rt: Runtime, d: AdminDeps): () => Promise<void> {
  const { store } = d;
  const history = d.services.history;
  let queue: Queue | undefined;
  const ops = new Operations({
    redis: rt.redis,
    keys: rt.keys,
    logger: rt.logger,
    store,
    history,
    queue: () => {
      queue ??= createQueue(rt.redis, rt.keys, rt.keys.retryQueue, rt.logger);
      return queue;
    },
  });
  const tester = new TestSender({
    redis: rt.redis,
    keys: rt.keys,
    logger: rt.logger,
    allowCidrs: rt.config.targetAllowCidrs,
  });
  const running = new Set<Promise<void>>();

  /** GET of a page of the event log (a tenant key may call it): 404 for an unknown tenant. */
  const eventPageRoute = <K extends string, Q>(
    path: string,
    schema: { params: object; querystring: object; item: object },
    load: (p: P<'tid' | K>, q: Q) => Promise<unknown>,
  ) =>
    app.get<{ Params: P<'tid' | K>; Querystring: Q }>(
      path,
      tenantKeySpec(
        'events',
        { params: schema.params, querystring: schema.querystring, response: { 200: h.page(schema.item) } },
        [400, 401, 403, 404, 503],
      ),
      async (req) => {
        // Fastify cannot resolve its request types over a type parameter: these are the route's own.
        const p = req.params as P<'tid' | K>;
        await store.requireTenant(p.tid);
        return load(p, req.query as Q);
      },
    );

  eventPageRoute<
    never,
    {
      since?: string;
      until?: string;
      type?: string;
      status?: DeliveryStatus;
      cursor?: string;
      limit?: string;
    }
  >(
    '/tenants/:tid/events',
    { params: s.tidParams, querystring: h.eventsQuery, item: h.loggedEventSchema },
    (p, q) =>
      history.listEvents(p.tid, {
        ...(q.since !== undefined ? { since: parseTime('since', q.since)! } : {}),
        ...(q.until !== undefined ? { until: parseTime('until', q.until)! } : {}),
        ...(q.type !== undefined ? { type: q.type } : {}),
        ...(q.status !== undefined ? { status: q.status } : {}),
        ...(q.cursor !== undefined ? { cursor: q.cursor } : {}),
        limit: limitOf(q.limit),
      }),
  );

  eventPageRoute<'eid', { cursor?: string; limit?: string }>(
    '/tenants/:tid/events/:eid/attempts',
    { params: s.tidEidParams, querystring: h.pageQuery, item: h.attemptSchema },
    async (p, q) => {
      const page = await history.eventAttempts(p.tid, p.eid, {
        ...(q.cursor !== undefined ? { cursor: q.cursor } : {}),
        limit: limitOf(q.limit),
      });
      if (!page) throw errors.notFound(`event ${p.eid} not found in the event log`);
      return page;
    },
  );

  app.post<{ Params: P<'tid' | 'eid'>; Body: { endpointId?: string; requestId?: string } }>(
    '/tenants/:tid/events/:eid/resend',
    {
      ...tenantKeySpec(
        'events',
        {
          params: s.tidEidParams,
          body: h.resendBody,
          response: operationStarted('handed to the retry queue'),
        },
        [400, 401, 403, 404, 409, 503],
      ),
      preValidation: emptyBodyIsObject,
    },
    async (req, reply) => {
      await store.requireTenant(req.params.tid);
      const requestId = requestIdOf(req, req.body);
      const { op, created } = await ops.resend(req.params.tid, req.params.eid, {
        ...(req.body.endpointId ? { endpointId: req.body.endpointId } : {}),
        ...(requestId ? { requestId } : {}),
      });
      return reply.code(created ? 202 : 200).send(op);
    },
  );

  app.get<{
    Params: P<'tid' | 'eid'>;
    Querystring: {
      status?: 'delivered' | 'failed';
      since?: string;
      until?: string;
      cursor?: string;
      limit?: string;
    };
  }>(
    '/tenants/:tid/endpoints/:eid/attempts',
    spec(
      'endpoints',
      {
        params: s.tidEidParams,
        querystring: h.endpointAttemptsQuery,
        response: { 200: h.page(h.attemptSchema) },
      },
      [400, 401, 404, 503],
    ),
    async (req) => {
      await store.requireTenant(req.params.tid);
      await store.requireEndpoint(req.params.tid, req.params.eid);
      const q = req.query;
      return history.endpointAttempts(req.params.tid, req.params.eid, {
        ...(q.status !== undefined ? { status: q.status } : {}),
        ...(q.since !== undefined ? { since: parseTime('since', q.since)! } : {}),
        ...(q.until !== undefined ? { until: parseTime('until', q.until)! } : {}),
        ...(q.cursor !== undefined ? { cursor: q.cursor } : {}),
        limit: limitOf(q.limit),
      });
    },
  );

  app.post<{ Params: P<'tid' | 'eid'>; Body: { since: string; requestId?: string } }>(
    '/tenants/:tid/endpoints/:eid/recover',
    spec(
      'endpoints',
      {
        params: s.tidEidParams,
        body: h.recoverBody,
        response: operationStarted('recovering; poll the operation for progress'),
      },
      [400, 401, 404, 409, 503],
    ),
    async (req, reply) => {
      await store.requireTenant(req.params.tid);
      const since = Date.parse(req.body.since);
      const ms = /^\d{10,16}$/.test(req.body.since) ? Number(req.body.since) : since;
      if (!Number.isFinite(ms)) throw errors.invalidBody('body/since must be ISO-8601 or unix milliseconds');
      const requestId = requestIdOf(req, req.body);
      const { op, created, done } = await ops.recover(req.params.tid, req.params.eid, {
        since: ms,
        ...(requestId ? { requestId } : {}),
      });
      running.add(done);
      void done.finally(() => running.delete(done));
      return reply.code(created ? 202 : 200).send(op);
    },
  );

  app.get<{ Params: P<'tid' | 'opid'> }>(
    '/tenants/:tid/operations/:opid',
    tenantKeySpec(
      'events',
      { params: h.tidOpParams, response: { 200: h.operationSchema } },
      [400, 401, 403, 404],
    ),
    async (req) => {
      await store.requireTenant(req.params.tid);
      const op = await ops.get(req.params.tid, req.params.opid);
      if (!op) throw errors.notFound(`operation ${req.params.opid} not found`);
      return op;
    },
  );

  app.post<{ Params: P<'tid' | 'eid'> }>(
    '/tenants/:tid/endpoints/:eid/test',
    spec(
      'endpoints',
      {
        params: s.tidEidParams,
        response: { 200: { description: 'the attempt, whatever the endpoint answered', ...h.attemptSchema } },
      },
      [400, 401, 404],
    ),
    async (req) => {
      const tenant = await store.requireTenant(req.params.tid);
      const ep = await store.requireEndpoint(req.params.tid, req.params.eid);
      return tester.send(tenant, ep);
    },
  );

  app.delete<{ Params: P<'tid'>; Querystring: { endpointId?: string } }>(
    '/tenants/:tid/dlq',
    spec(
      'dlq',
      {
        params: s.tidParams,
        querystring: {
          type: 'object',
          additionalProperties: false,
          properties: { endpointId: { type: 'string', pattern: s.ID_PATTERN } },
        },
        response: {
          200: {
            description: 'deleted (counted in spillway_dlq_purged_total)',
            type: 'object',
            required: ['purged'],
            properties: { purged: { type: 'integer' } },
          },
        },
      },
      [400, 401, 404, 503],
    ),
    async (req) => {
      await store.requireTenant(req.params.tid);
      const endpointId = req.query.endpointId;
      if (endpointId) await store.requireEndpoint(req.params.tid, endpointId);
      return { purged: await d.services.purgeDlq(req.params.tid, endpointId ? { endpointId } : {}) };
    },
  );

  return async () => {
    await Promise.allSettled([...running]);
    await tester.close();
    await queue?.close().catch(() => {});
  };
}

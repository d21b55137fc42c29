import swagger from '@fastify/swagger';
import { errors, requireAdminToken, type SpillwayError, toResponse, VERSION } from '@spillway/shared';
import { Ajv } from 'ajv';
import type { FastifyError, FastifyInstance, FastifyReply } from 'fastify';
import { ConfigStore } from '../config/store.ts';
import { Notifier } from '../notify/notifier.ts';
import type { RoleContext, RoleHandle } from '../roles/roles.ts';
import type { Runtime } from '../roles/runtime.ts';
import { ApiKeys, bearer, type Principal, tokenChecker } from './auth.ts';
import { registerConsole } from './console/index.ts';
import { createEventAdmission } from './quota.ts';
import { createRouterServices } from './router-services.ts';
import { type AdminDeps, registerRoutes } from './routes.ts';
import { registerHistoryRoutes } from './routes-history.ts';
import { registerSecretRoutes } from './routes-secrets.ts';

declare module 'fastify' {
  interface FastifyRequest {
    principal?: Principal;
  }
}

/** Admin role: the /v1 API and /openapi.json on the process's HTTP server. */
export async function startAdmin({ rt, http }: RoleContext): Promise<RoleHandle> {
  const services = createRouterServices(rt);
  const notifier = new Notifier({
    redis: rt.redis,
    keys: rt.keys,
    logger: rt.logger,
    target: rt.config.notify,
  });
  const deps: AdminDeps = {
    store: new ConfigStore(rt.redis, rt.keys, rt.secrets),
    apiKeys: new ApiKeys(rt),
    services,
    admission: createEventAdmission({
      ...rt,
      onQuotaExceeded: (tenantId, quota) =>
        void notifier.notify({
          kind: 'tenant.quota_exceeded',
          tenantId,
          subject: tenantId,
          data: { quota, day: new Date().toISOString().slice(0, 10) },
        }),
    }),
  };
  const closers: (() => Promise<void>)[] = [];
  await http.register(async (api) => registerAdminApi(api, rt, deps, closers));
  return {
    name: 'admin',
    close: async () => {
      for (const c of closers) await c().catch(() => {});
      await services.close();
    },
  };
}

/**
 * Request validation with our own Ajv: fastify's default removes unknown properties and coerces
 * types, which would turn `{"limits":{"concurrency":"16"}}` or a typo'd field into a silent success.
 */
function makeAjv(): Ajv {
  return new Ajv({
    removeAdditional: false,
    coerceTypes: false,
    useDefaults: false,
    allErrors: false,
    strict: false,
  });
}

async function registerAdminApi(
  api: FastifyInstance,
  rt: Runtime,
  deps: AdminDeps,
  closers: (() => Promise<void>)[],
): Promise<void> {
  const isAdmin = tokenChecker(requireAdminToken(rt.config));
  const ajv = makeAjv();
  api.setValidatorCompiler(({ schema }) => ajv.compile(schema));
  // Responses are plain JSON: the response schemas document the API, they must never drop fields.
  api.setSerializerCompiler(() => (data) => JSON.stringify(data));
  api.setErrorHandler((err: FastifyError | SpillwayError, req, reply) =>
    sendError(rt, fromValidation(err, req.body === undefined), reply, req.url),
  );
  // A bodiless POST (pause, resume, replay, ...) sent with `content-type: application/json` and no
  // body is what many HTTP clients send. It reaches the route as no body at all: routes whose body
  // is optional take it as `{}`; a route that needs one answers invalid_json (fromValidation).
  // Non-empty bodies go to fastify's own parser (prototype-poisoning checks included).
  const json = api.getDefaultJsonParser('error', 'error');
  api.removeContentTypeParser('application/json');
  api.addContentTypeParser('application/json', { parseAs: 'string' }, (req, body, done) => {
    if (body === '') return done(null, undefined);
    json(req, body as string, done);
  });

  await api.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'Spillway admin API',
        version: VERSION,
        description:
          'Multi-tenant webhook fan-out router. Every /v1 route takes `Authorization: Bearer <token>`.',
      },
      components: {
        securitySchemes: {
          bearer: {
            type: 'http',
            scheme: 'bearer',
            description: 'SPILLWAY_ADMIN_TOKEN, or a tenant API key (spk_...) on the routes that say so',
          },
        },
      },
      security: [{ bearer: [] }],
    },
    // biome-ignore lint/suspicious/noExplicitAny: the swagger/openapi document union is not worth modelling here
    transformObject: (doc) => addHealthPaths((doc as { openapiObject: OpenApiDoc }).openapiObject) as any,
  });

  await api.register(
    async (v1) => {
      v1.addHook('onRequest', async (req) => {
        const token = bearer(req.headers.authorization);
        if (!token) throw errors.unauthorized('missing Authorization: Bearer <token>');
        if (isAdmin(token)) {
          req.principal = { kind: 'admin' };
          return;
        }
        const key = await deps.apiKeys.resolve(token);
        if (!key) throw errors.unauthorized('bad token');
        req.principal = { kind: 'tenant', tenantId: key.tenantId, keyId: key.id };
        // A tenant key may call only routes marked tenantKey, and only for its own tenant.
        const tid = (req.params as { tid?: string }).tid;
        if (!req.routeOptions.config.tenantKey)
          throw errors.forbidden('a tenant API key cannot call this route');
        if (tid !== key.tenantId) throw errors.forbidden('a tenant API key can only reach its own tenant');
      });
      v1.setNotFoundHandler((req, reply) =>
        sendError(rt, errors.notFound(`no route ${req.method} ${req.url.split('?')[0]}`), reply, req.url),
      );
      registerRoutes(v1, deps);
      closers.push(registerHistoryRoutes(v1, rt, deps));
      registerSecretRoutes(v1, deps);
    },
    { prefix: '/v1' },
  );

  api.get('/openapi.json', { schema: { hide: true } }, async () => api.swagger());
  await registerConsole(api, rt, deps);
}

/** Every admin error answer comes from the shared catalog (`toResponse`); 5xx are logged with their stack. */
function sendError(
  rt: Runtime,
  err: FastifyError | SpillwayError,
  reply: FastifyReply,
  url: string,
): FastifyReply {
  const res = toResponse(err);
  if (res.error.code === 'SPW_ERR_INTERNAL') rt.logger.error({ err, url }, 'admin request failed');
  else if (res.status >= 500) rt.logger.warn({ err, url, code: res.error.code }, 'admin request failed');
  return reply.code(res.status).headers(res.headers).send(res.body);
}

/**
 * A request that failed schema validation: invalid_body for the body, invalid_request for
 * params/query; invalid_json for a route that needs a body and got none.
 */
function fromValidation(err: FastifyError | SpillwayError, noBody: boolean): FastifyError | SpillwayError {
  const fe = err as FastifyError;
  if (!fe.validation) return err;
  if ((fe.validationContext ?? 'body') === 'body' && noBody)
    return errors.invalidJson('the body is empty; this route needs a JSON object');
  const extra = (fe.validation[0]?.params as { additionalProperty?: string } | undefined)?.additionalProperty;
  const message = extra === undefined ? fe.message : `${fe.message} ("${extra}")`;
  return (fe.validationContext ?? 'body') === 'body'
    ? errors.invalidBody(message)
    : errors.invalidRequest(message);
}

interface OpenApiDoc {
  paths?: Record<string, unknown>;
  [k: string]: unknown;
}

/** /healthz, /readyz and /metrics are served by ../roles/http.ts before this plugin exists; list them too. */
function addHealthPaths(doc: OpenApiDoc): OpenApiDoc {
  const open = { security: [] as unknown[], tags: ['health'] };
  const json = (description: string, properties: Record<string, unknown>) => ({
    description,
    content: { 'application/json': { schema: { type: 'object', properties } } },
  });
  return {
    ...doc,
    paths: {
      ...doc.paths,
      '/healthz': {
        get: {
          ...open,
          summary: 'process up',
          responses: { 200: json('up', { status: { type: 'string' } }) },
        },
      },
      '/readyz': {
        get: {
          ...open,
          summary:
            "what this process's roles need answers: Redis, and Kafka for worker and all (no kafka field otherwise)",
          responses: {
            200: json('ready', {
              status: { type: 'string' },
              redis: { type: 'boolean' },
              kafka: { type: 'boolean' },
            }),
            503: json('not ready', {
              status: { type: 'string' },
              redis: { type: 'boolean' },
              kafka: { type: 'boolean' },
            }),
          },
        },
      },
      '/metrics': {
        get: {
          ...open,
          summary: 'Prometheus metrics (Authorization: Bearer $SPILLWAY_METRICS_TOKEN when that is set)',
          responses: {
            200: {
              description: 'Prometheus text',
              content: { 'text/plain': { schema: { type: 'string' } } },
            },
          },
        },
      },
    },
  };
}

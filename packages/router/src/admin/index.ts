import swagger from '@fastify/swagger';
import { errors, requireAdminToken, type SpillwayError, toResponse, VERSION } from '@spillway/shared';
import { Ajv } from 'ajv';
import type { FastifyError, FastifyInstance, FastifyReply } from 'fastify';
import { ConfigStore } from '../config/store.ts';
import type { RoleContext, RoleHandle } from '../roles/roles.ts';
import type { Runtime } from '../roles/runtime.ts';
import { ApiKeys, bearer, type Principal, tokenChecker } from './auth.ts';
import { registerConsole } from './console/index.ts';
import { createRouterServices } from './router-services.ts';
import { type AdminDeps, registerRoutes } from './routes.ts';

declare module 'fastify' {
  interface FastifyRequest {
    principal?: Principal;
  }
}

/** Admin role: the /v1 API and /openapi.json on the process's HTTP server. */
export async function startAdmin({ rt, http }: RoleContext): Promise<RoleHandle> {
  const services = createRouterServices(rt);
  const deps: AdminDeps = {
    store: new ConfigStore(rt.redis, rt.keys),
    apiKeys: new ApiKeys(rt),
    services,
  };
  await http.register(async (api) => registerAdminApi(api, rt, deps));
  return {
    name: 'admin',
    close: async () => {
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

async function registerAdminApi(api: FastifyInstance, rt: Runtime, deps: AdminDeps): Promise<void> {
  const isAdmin = tokenChecker(requireAdminToken(rt.config));
  const ajv = makeAjv();
  api.setValidatorCompiler(({ schema }) => ajv.compile(schema));
  // Responses are plain JSON: the response schemas document the API, they must never drop fields.
  api.setSerializerCompiler(() => (data) => JSON.stringify(data));
  api.setErrorHandler((err: FastifyError | SpillwayError, req, reply) => sendError(rt, err, reply, req.url));

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
  const res = toResponse(fromValidation(err));
  if (res.error.code === 'SPW_ERR_INTERNAL') rt.logger.error({ err, url }, 'admin request failed');
  else if (res.status >= 500) rt.logger.warn({ err, url, code: res.error.code }, 'admin request failed');
  return reply.code(res.status).headers(res.headers).send(res.body);
}

/** A request that failed schema validation: invalid_body for the body, invalid_request for params/query. */
function fromValidation(err: FastifyError | SpillwayError): unknown {
  const fe = err as FastifyError;
  if (!fe.validation) return err;
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
          summary: 'Redis and Kafka answer',
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
          summary: 'Prometheus metrics',
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

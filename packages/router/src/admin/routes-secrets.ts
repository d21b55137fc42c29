import { errors, liveSecrets, type Rate, rotatedSecrets, type Source } from '@spillway/shared';
import type { FastifyInstance } from 'fastify';
import {
  type AdminDeps,
  checkCidrs,
  checkSourceSecret,
  type P,
  sourceView,
  spec,
  updated,
} from './routes.ts';
import * as s from './schemas.ts';

/** How long a replaced source secret keeps verifying unless the PATCH says otherwise. */
const SOURCE_OVERLAP_S = 24 * 3600;

/** A secret and the replaced ones still live: what GET .../secret answers. */
function secretView(holder: Pick<Source, 'secret' | 'previousSecrets'>, nowMs = Date.now()) {
  const live = new Set(liveSecrets(holder, nowMs));
  return {
    secret: holder.secret,
    previousSecrets: (holder.previousSecrets ?? []).filter(
      (p) => p.secret !== holder.secret && live.has(p.secret),
    ),
  };
}

/**
 * The routes that hand out or change secrets, and the key rotation command. Admin token only: a
 * tenant API key posts events and reads its own events and stats, and a signing secret would let it
 * forge deliveries to the tenant's customers (docs/operations.md, "Secrets").
 */
export function registerSecretRoutes(app: FastifyInstance, d: AdminDeps): void {
  const { store } = d;

  for (const [collection, param, params, load] of [
    ['endpoints', 'eid', s.tidEidParams, (tid: string, id: string) => store.requireEndpoint(tid, id)],
    ['sources', 'sid', s.tidSidParams, (tid: string, id: string) => store.requireSource(tid, id)],
  ] as const) {
    app.get<{ Params: P<'tid' | typeof param> }>(
      `/tenants/:tid/${collection}/:${param}/secret`,
      spec(collection, { params, response: { 200: s.secretSchema } }, [400, 401, 403, 404]),
      async (req) => {
        await store.requireTenant(req.params.tid);
        return secretView(await load(req.params.tid, req.params[param]));
      },
    );
  }

  app.patch<{
    Params: P<'tid' | 'sid'>;
    Body: {
      secret?: string;
      secretOverlapSeconds?: number;
      allowCidrs?: string[] | null;
      maxBodyBytes?: number;
      rate?: Rate | null;
    };
  }>(
    '/tenants/:tid/sources/:sid',
    updated('sources', s.tidSidParams, s.patchSourceBody, s.sourceSchema),
    async (req) => {
      const b = req.body;
      if (b.secretOverlapSeconds !== undefined && b.secret === undefined)
        throw errors.invalidBody(
          'body/secretOverlapSeconds needs body/secret (it is the overlap of a rotation)',
        );
      const allowCidrs = b.allowCidrs === null ? null : checkCidrs(b.allowCidrs);
      await store.requireTenant(req.params.tid);
      const before = await store.requireSource(req.params.tid, req.params.sid);
      if (b.secret !== undefined) checkSourceSecret(before.kind, b.secret);
      const src = await store.updateSource(req.params.tid, req.params.sid, (cur) => {
        const next: Source = { ...cur };
        if (allowCidrs === null) delete next.allowCidrs;
        else if (allowCidrs) next.allowCidrs = allowCidrs;
        if (b.maxBodyBytes) next.maxBodyBytes = b.maxBodyBytes;
        if (b.rate === null) delete next.rate;
        else if (b.rate) next.rate = b.rate;
        // Rotation: the replaced secret keeps verifying for the overlap, so the provider can be
        // switched to the new one without a refused delivery in between. Overlap 0: only the new
        // secret from now (with the current secret, that ends an overlap early).
        if (b.secret !== undefined && (b.secret !== cur.secret || b.secretOverlapSeconds === 0)) {
          const overlapMs = (b.secretOverlapSeconds ?? SOURCE_OVERLAP_S) * 1000;
          Object.assign(next, rotatedSecrets(cur, overlapMs, b.secret, Date.now()));
        }
        if (next.previousSecrets?.length === 0) delete next.previousSecrets;
        return next;
      });
      return sourceView(src);
    },
  );

  app.post(
    '/secrets/reencrypt',
    spec('secrets', { response: { 200: s.reencryptSchema } }, [401, 403, 503]),
    async () => store.reencryptSecrets(),
  );
}

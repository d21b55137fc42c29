import type { RoleContext, RoleHandle } from './roles.ts';

/** Ingest role: the IngestServer from @spillway/ingest wired to the router's durable intake. */
export async function startIngest({ rt }: RoleContext): Promise<RoleHandle> {
  rt.logger.warn('ingest role: not implemented yet (issue 7)');
  return { name: 'ingest', close: async () => {} };
}

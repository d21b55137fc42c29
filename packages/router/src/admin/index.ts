import type { RoleContext, RoleHandle } from '../roles.ts';

/** Admin role: the /v1 API on the process's HTTP server. */
export async function startAdmin({ rt }: RoleContext): Promise<RoleHandle> {
  rt.logger.warn('admin role: not implemented yet (issue 6)');
  return { name: 'admin', close: async () => {} };
}

import type { RoleContext, RoleHandle } from './roles.ts';

/** Worker role: intake jobs → fan-out → credit queues → delivery; spill drainer; retries. */
export async function startWorker({ rt }: RoleContext): Promise<RoleHandle> {
  rt.logger.warn('worker role: not implemented yet (issue 3)');
  return { name: 'worker', close: async () => {} };
}

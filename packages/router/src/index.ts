export { start, ROLES, type Role, type Started } from './start.ts';
export { createRuntime, checkRedis, ensureSpillTopic, type Runtime } from './runtime.ts';
export { buildProgram, main } from './cli/main.ts';
export { ConfigCache, ConfigStore, matchesEventType, type Change } from './store.ts';

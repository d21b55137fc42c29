export { type Config, DEFAULTS, loadConfig, type RedisTarget, requireAdminToken } from './config.ts';
export { formatDuration, parseDuration } from './duration.ts';
export { errors, isSpillwayError, SpillwayError } from './errors.ts';
export { createKeys, type Keys, tenantTag } from './keys.ts';
export { createLogger, type Logger } from './logger.ts';
export { registry } from './metrics.ts';
export { createRedis, type RedisClient } from './redis.ts';
export type * from './types.ts';
export { VERSION } from './version.ts';

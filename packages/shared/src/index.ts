export { DEFAULTS, loadConfig, requireAdminToken, type Config, type RedisTarget } from './config.ts';
export { parseDuration, formatDuration } from './duration.ts';
export { SpillwayError, errors, isSpillwayError } from './errors.ts';
export { createKeys, tenantTag, type Keys } from './keys.ts';
export { createLogger, type Logger } from './logger.ts';
export { registry } from './metrics.ts';
export { createRedis, type RedisClient } from './redis.ts';
export type * from './types.ts';
export { VERSION } from './version.ts';

export { BatchedWriter, type BatchedWriterOptions, ListWriter } from './batch.ts';
export {
  type BreakerChangeMessage,
  CHANNELS,
  channels,
  type DeliveryAttemptMessage,
  type IntakeCommitMessage,
  type SpillMessage,
} from './channels.ts';
export { defineCommands, parseScriptName } from './commands.ts';
export {
  type CliConfig,
  type Config,
  DEFAULTS,
  loadCliConfig,
  loadConfig,
  type RedisTarget,
  requireAdminToken,
} from './config.ts';
export { formatDuration, parseDuration } from './duration.ts';
export {
  type ErrorResponse,
  errors,
  isRedisDown,
  isSpillwayError,
  SpillwayError,
  toResponse,
  toSpillwayError,
} from './errors.ts';
export { createKeys, type Keys, tenantTag } from './keys.ts';
export { createLogger, type Logger, packageLogger } from './logger.ts';
export { counter, gauge, histogram, metricFactory, registry } from './metrics.ts';
export { createQueue, JOB_OPTS } from './queue.ts';
export { createRedis, type RedisClient } from './redis.ts';
export { retryDelayMs, retryForever, sleep, withTimeout } from './retry.ts';
export type * from './types.ts';
export { VERSION } from './version.ts';
export { generateWhsec, parseWhsec, WHSEC_PREFIX } from './whsec.ts';

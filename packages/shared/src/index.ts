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
  loadEdgeToolConfig,
  type RedisTarget,
  requireAdminToken,
  secretBoxOf,
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
export { counter, gauge, getOrCreateMetric, histogram, metricFactory, registry } from './metrics.ts';
export { definedOf } from './options.ts';
export { createQueue, JOB_OPTS, KEYED_JOB_OPTS } from './queue.ts';
export { createRedis, type RedisClient } from './redis.ts';
export { retryDelayMs, retryForever, sleep, withTimeout } from './retry.ts';
export {
  createPlainBox,
  createSecretBox,
  isSealed,
  parseSecretKey,
  type SecretBox,
  secretKeyId,
} from './secret-box.ts';
export { liveSecrets, rotatedSecrets, type SecretHolder } from './secret-rotation.ts';
export type * from './types.ts';
export { VERSION } from './version.ts';
export {
  generateWhsec,
  parseWhsec,
  WHSEC_MIN_KEY_BYTES,
  WHSEC_PREFIX,
  WHSEC_SCHEMA_PATTERN,
  whsecProblem,
} from './whsec.ts';

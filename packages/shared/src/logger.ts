import pino, { type Logger } from 'pino';
import { DEFAULTS } from './config.ts';

export type { Logger };

const ROOT = Symbol('spillway.rootLogger');
type Tagged = Logger & { [ROOT]?: Logger };

/**
 * The one logger factory: JSON lines to stdout, errors logged as `{ err }` (pino's serializer keeps
 * type, message and stack). `level` comes from the validated config (SPILLWAY_LOG_LEVEL).
 */
export function createLogger(
  level: string = DEFAULTS.SPILLWAY_LOG_LEVEL,
  bindings: Record<string, unknown> = {},
): Logger {
  return pino({ level, base: { pid: process.pid, ...bindings }, timestamp: pino.stdTimeFunctions.isoTime });
}

/**
 * The logger of one package: a child with `pkg`. Children are made from the root logger, so a
 * logger handed from one package to another (router → delivery) carries one `pkg`, not two.
 */
export function packageLogger(logger: Logger, pkg: string): Logger {
  const root = (logger as Tagged)[ROOT] ?? logger;
  if (logger.bindings().pkg === pkg) return logger;
  const child = root.child({ pkg }) as Tagged;
  child[ROOT] = root;
  return child;
}

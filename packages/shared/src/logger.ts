import pino, { type Logger } from 'pino';

export type { Logger };

/** The one logger factory: JSON lines to stdout, a `pkg` binding per package. */
export function createLogger(
  level: string = process.env.SPILLWAY_LOG_LEVEL ?? 'info',
  bindings: Record<string, unknown> = {},
): Logger {
  return pino({ level, base: { pid: process.pid, ...bindings }, timestamp: pino.stdTimeFunctions.isoTime });
}

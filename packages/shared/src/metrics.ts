import { collectDefaultMetrics, Registry } from 'prom-client';

/**
 * The process-wide Prometheus registry. Packages register their metrics on it (units in names:
 * `_seconds`, `_bytes`, `_total`); every role serves it on /metrics.
 */
export const registry = new Registry();
collectDefaultMetrics({ register: registry, prefix: 'spillway_' });

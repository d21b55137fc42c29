import { registry } from '@spillway/shared';
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';

/**
 * Ingest metrics on the shared registry. Created once per process: several pipelines (tests, or an
 * ingest and an all role in one process) share them, as Prometheus expects one series per name.
 */
export interface IngestMetrics {
  /** outcome: accepted, duplicate, or the refusal (unauthorized, too_large, rate_limited, ...). */
  requests: Counter<'source' | 'outcome'>;
  bodyBytes: Counter<'source'>;
  verifyFailures: Counter<'source' | 'reason'>;
  enqueueSeconds: Histogram<'outcome'>;
  inflightBodyBytes: Gauge;
}

let metrics: IngestMetrics | undefined;

function getOrCreate<T>(reg: Registry, name: string, make: () => T): T {
  return (reg.getSingleMetric(name) as T | undefined) ?? make();
}

export function ingestMetrics(reg: Registry = registry): IngestMetrics {
  if (metrics) return metrics;
  const registers = [reg];
  metrics = {
    requests: getOrCreate(
      reg,
      'spillway_ingest_requests_total',
      () =>
        new Counter({
          name: 'spillway_ingest_requests_total',
          help: 'Ingest requests by source and outcome',
          labelNames: ['source', 'outcome'] as const,
          registers,
        }),
    ),
    bodyBytes: getOrCreate(
      reg,
      'spillway_ingest_body_bytes_total',
      () =>
        new Counter({
          name: 'spillway_ingest_body_bytes_total',
          help: 'Request body bytes read at ingest',
          labelNames: ['source'] as const,
          registers,
        }),
    ),
    verifyFailures: getOrCreate(
      reg,
      'spillway_ingest_verify_failures_total',
      () =>
        new Counter({
          name: 'spillway_ingest_verify_failures_total',
          help: 'Signature verification failures by source and reason',
          labelNames: ['source', 'reason'] as const,
          registers,
        }),
    ),
    enqueueSeconds: getOrCreate(
      reg,
      'spillway_ingest_enqueue_seconds',
      () =>
        new Histogram({
          name: 'spillway_ingest_enqueue_seconds',
          help: 'Time from a verified body to the intake answering (durable or duplicate)',
          labelNames: ['outcome'] as const,
          buckets: [0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5],
          registers,
        }),
    ),
    inflightBodyBytes: getOrCreate(
      reg,
      'spillway_ingest_inflight_body_bytes',
      () =>
        new Gauge({
          name: 'spillway_ingest_inflight_body_bytes',
          help: 'Request body bytes held in memory now (all pipelines)',
          registers,
        }),
    ),
  };
  return metrics;
}

import { registry } from '@spillway/shared';
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';

/**
 * Ingest metrics on the shared registry. Created once per process: several pipelines (tests, or an
 * ingest and an all role in one process) share them, as Prometheus expects one series per name.
 * Labelled by source *kind* (github, stripe, shopify, standard; `-` when no known source was named),
 * never by source id: a source id is the only secret in an ingest URL, and /metrics is often
 * scraped by more people than should hold it (issue 15).
 */
export interface IngestMetrics {
  /** outcome: accepted, duplicate, or the refusal (unauthorized, too_large, rate_limited, ...). */
  requests: Counter<'kind' | 'outcome'>;
  bodyBytes: Counter<'kind'>;
  verifyFailures: Counter<'kind' | 'reason'>;
  /** Signed bodies seen again under another id within the dedup window (answered as duplicates). */
  replays: Counter<'kind'>;
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
          help: 'Ingest requests by source kind and outcome',
          labelNames: ['kind', 'outcome'] as const,
          registers,
        }),
    ),
    bodyBytes: getOrCreate(
      reg,
      'spillway_ingest_body_bytes_total',
      () =>
        new Counter({
          name: 'spillway_ingest_body_bytes_total',
          help: 'Request body bytes read at ingest, by source kind',
          labelNames: ['kind'] as const,
          registers,
        }),
    ),
    verifyFailures: getOrCreate(
      reg,
      'spillway_ingest_verify_failures_total',
      () =>
        new Counter({
          name: 'spillway_ingest_verify_failures_total',
          help: 'Signature verification failures by source kind and reason',
          labelNames: ['kind', 'reason'] as const,
          registers,
        }),
    ),
    replays: getOrCreate(
      reg,
      'spillway_ingest_replays_total',
      () =>
        new Counter({
          name: 'spillway_ingest_replays_total',
          help: 'Signed bodies seen again under another event id within the dedup window (github, shopify)',
          labelNames: ['kind'] as const,
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

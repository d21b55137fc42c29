import { getOrCreateMetric, registry } from '@spillway/shared';
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
  /**
   * Bodies whose signature was checked, by where the HMAC ran: `ring` (the io_uring thread, under
   * the route table's keys) or `js` (the pipeline's verifier).
   */
  verified: Counter<'kind' | 'where'>;
  enqueueSeconds: Histogram<'outcome'>;
  inflightBodyBytes: Gauge;
  /**
   * Connections the front door classified by their first bytes: http1, h2c, tls (then
   * tls_h2 / tls_http1 once ALPN chose), and the ones closed unserved: tls_unconfigured,
   * tls_failed, ssh, unknown, silent (nothing sent before the headers timeout or the close).
   */
  connections: Counter<'class'>;
  /** HTTP/2 connections told GOAWAY and closed for resetting streams too fast (CVE-2023-44487). */
  h2RapidResets: Counter;
  /** TLS certificate reloads (SIGHUP): ok or failed (the previous certificate stays). */
  tlsReloads: Counter<'outcome'>;
  /** notAfter of the certificate being served, unix seconds. */
  tlsCertNotAfter: Gauge;
}

let metrics: IngestMetrics | undefined;

const getOrCreate = getOrCreateMetric;

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
    verified: getOrCreate(
      reg,
      'spillway_ingest_verified_total',
      () =>
        new Counter({
          name: 'spillway_ingest_verified_total',
          help: 'Request bodies whose signature was checked, by source kind and where the HMAC ran (ring, js)',
          labelNames: ['kind', 'where'] as const,
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
    connections: getOrCreate(
      reg,
      'spillway_ingest_connections_total',
      () =>
        new Counter({
          name: 'spillway_ingest_connections_total',
          help: 'Ingest connections by what their first bytes were (io_uring: the ones handed off the ring)',
          labelNames: ['class'] as const,
          registers,
        }),
    ),
    h2RapidResets: getOrCreate(
      reg,
      'spillway_ingest_h2_rapid_reset_closes_total',
      () =>
        new Counter({
          name: 'spillway_ingest_h2_rapid_reset_closes_total',
          help: 'HTTP/2 connections closed (GOAWAY ENHANCE_YOUR_CALM) for resetting streams too fast',
          registers,
        }),
    ),
    tlsReloads: getOrCreate(
      reg,
      'spillway_ingest_tls_reloads_total',
      () =>
        new Counter({
          name: 'spillway_ingest_tls_reloads_total',
          help: 'TLS certificate reloads by outcome (ok, failed: the previous certificate stays)',
          labelNames: ['outcome'] as const,
          registers,
        }),
    ),
    tlsCertNotAfter: getOrCreate(
      reg,
      'spillway_ingest_tls_cert_not_after_seconds',
      () =>
        new Gauge({
          name: 'spillway_ingest_tls_cert_not_after_seconds',
          help: 'Expiry (notAfter, unix seconds) of the TLS certificate the ingest port serves',
          registers,
        }),
    ),
  };
  return metrics;
}

import { metricFactory } from '@spillway/shared';

/**
 * Router metrics on the shared registry. Created once per process (module scope, and reused if
 * another copy of this module already registered them) because tests and `--role all` run several
 * workers and intakes in one process; per-worker numbers are summed by the gauges' collect().
 */

/** What a live worker contributes to the process-wide gauges. */
export interface GaugeSource {
  /** tenant → credits used in this worker. */
  creditsUsed(): Iterable<[string, number]>;
  /** Delivery tasks in this worker's memory (each holds a credit). */
  tasksInMemory(): number;
  /** Event body bytes those tasks hold (bounded by SPILLWAY_WORKER_BODY_BUDGET). */
  bodyBytes(): number;
}

const sources = new Set<GaugeSource>();

/** Registers a worker's engine with the gauges until the returned function is called. */
export function addGaugeSource(s: GaugeSource): () => void {
  sources.add(s);
  return () => sources.delete(s);
}

const { counter, gauge, histogram } = metricFactory({
  spillway_intake_batches_total:
    'Group commits of the durable intake by outcome (committed = one BullMQ job added, failed = 503 to every caller, duplicate = nothing new to add)',
  spillway_intake_events_total:
    'Events submitted to the durable intake by result (accepted, duplicate, rejected, withdrawn: its caller withdrew it)',
  spillway_events_api_refused_total:
    "Events the events API refused with 429 by reason (rate = over the tenant's events rate, quota = over its events per day)",
  spillway_intake_commit_duration_seconds:
    'Time to make one group-committed batch durable (dedup reserve + job add + promote), i.e. the latency a caller sees beyond the group-commit wait',
  spillway_intake_batch_events: 'Events per group commit',
  spillway_spill_produced_total: 'Spill records acknowledged by Kafka (new spills and re-appends)',
  spillway_spill_reappended_total:
    'Blocked spill records the drainer re-appended to the tail of the topic (churn of paused/saturated backlogs)',
  spillway_spill_admitted_total: 'Spill records the drainer brought back into memory (a credit was free)',
  spillway_spill_lookahead_records:
    "Spill records currently held in the drainers' per-partition look-ahead (not yet resolved)",
  spillway_router_credits_used: 'Credits in use per tenant, summed over the workers of this process',
  spillway_router_tasks_in_memory: 'Delivery tasks held in memory by the workers of this process',
  spillway_router_body_bytes:
    'Event body bytes held in memory by admitted delivery tasks of the workers of this process (bounded by SPILLWAY_WORKER_BODY_BUDGET)',
  spillway_retry_jobs_scheduled_total:
    'Delayed BullMQ retry jobs added (one job carries every task of one flush window and delay bucket)',
  spillway_retry_tasks_scheduled_total: 'Delivery tasks handed to retry jobs',
  spillway_dlq_writes_total:
    'Deliveries written to a tenant DLQ (last attempt failed, or a permanent failure)',
  spillway_tasks_discarded_total:
    'Delivery tasks discarded because their tenant or endpoint was deleted (the only tasks that end neither delivered nor in a DLQ)',
  spillway_history_records_total: 'History records Kafka acknowledged, by topic (events, attempts)',
  spillway_history_read_records_total:
    "History messages read back from Kafka to answer the API (a message packs a tenant's records of one flush and minute; a page reads the minutes the index points to, not the topic)",
  spillway_history_dropped_total:
    'History records given up on (Kafka did not take them after retries, or the writer buffer was full): the event log or attempt history misses them, delivery is not affected',
  spillway_dlq_purged_total:
    'Dead letters an operator purged (DELETE .../dlq): the one explicit discard of the DLQ',
  spillway_dlq_archived_total:
    'Dead letters moved from Redis to the Kafka DLQ archive (over the cap or the TTL)',
  spillway_notifications_total: 'Operator notifications by kind and result (sent, failed, skipped)',
  spillway_endpoints_disabled_total:
    'Endpoints the router disabled, by reason (gone = HTTP 410, failing = sustained failure)',
  spillway_job_reruns_joined_total:
    'Intake/retry jobs claimed again while this process still ran them (a missed lock renewal): the second run waited for the first instead of delivering again',
});

/** A gauge whose value is the sum of `of(source)` over the live workers at scrape time. */
const summed = (
  name: 'spillway_router_tasks_in_memory' | 'spillway_router_body_bytes',
  of: (s: GaugeSource) => number,
) =>
  gauge(name, {
    collect() {
      let n = 0;
      for (const s of sources) n += of(s);
      this.set(n);
    },
  });

export const intakeBatchesTotal = counter('spillway_intake_batches_total', ['outcome']);
export const intakeEventsTotal = counter('spillway_intake_events_total', ['result']);
export const eventsApiRefusedTotal = counter('spillway_events_api_refused_total', ['reason']);
export const intakeCommitSeconds = histogram(
  'spillway_intake_commit_duration_seconds',
  [0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 3],
);
export const intakeBatchEvents = histogram(
  'spillway_intake_batch_events',
  [1, 2, 4, 8, 16, 32, 64, 128, 256],
);
export const spillProducedTotal = counter('spillway_spill_produced_total');
export const spillReappendedTotal = counter('spillway_spill_reappended_total');
export const spillAdmittedTotal = counter('spillway_spill_admitted_total');
export const spillLookaheadRecords = gauge('spillway_spill_lookahead_records');
export const creditsUsedGauge = gauge('spillway_router_credits_used', {
  labelNames: ['tenant'],
  collect() {
    this.reset();
    const sum = new Map<string, number>();
    for (const s of sources)
      for (const [tenantId, n] of s.creditsUsed()) sum.set(tenantId, (sum.get(tenantId) ?? 0) + n);
    for (const [tenantId, n] of sum) this.set({ tenant: tenantId }, n);
  },
});
export const tasksInMemoryGauge = summed('spillway_router_tasks_in_memory', (s) => s.tasksInMemory());
export const bodyBytesGauge = summed('spillway_router_body_bytes', (s) => s.bodyBytes());
export const retryJobsTotal = counter('spillway_retry_jobs_scheduled_total');
export const retryTasksTotal = counter('spillway_retry_tasks_scheduled_total');
export const dlqWritesTotal = counter('spillway_dlq_writes_total');
export const tasksDiscardedTotal = counter('spillway_tasks_discarded_total', ['reason']);
export const historyRecordsTotal = counter('spillway_history_records_total', ['topic']);
export const historyDroppedTotal = counter('spillway_history_dropped_total');
export const dlqArchivedTotal = counter('spillway_dlq_archived_total');
export const notificationsTotal = counter('spillway_notifications_total', ['kind', 'result']);
export const endpointsDisabledTotal = counter('spillway_endpoints_disabled_total', ['reason']);
export const dlqPurgedTotal = counter('spillway_dlq_purged_total');
export const jobRerunsJoinedTotal = counter('spillway_job_reruns_joined_total', ['queue']);
export const historyReadRecordsTotal = counter('spillway_history_read_records_total');

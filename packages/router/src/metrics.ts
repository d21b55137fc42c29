import { counter, gauge, histogram } from '@spillway/shared';

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

export const intakeBatchesTotal = counter({
  name: 'spillway_intake_batches_total',
  help: 'Group commits of the durable intake by outcome (committed = one BullMQ job added, failed = 503 to every caller, duplicate = nothing new to add)',
  labelNames: ['outcome'],
});

export const intakeEventsTotal = counter({
  name: 'spillway_intake_events_total',
  help: 'Events submitted to the durable intake by result (accepted, duplicate, rejected)',
  labelNames: ['result'],
});

export const intakeCommitSeconds = histogram({
  name: 'spillway_intake_commit_duration_seconds',
  help: 'Time to make one group-committed batch durable (dedup reserve + job add + promote), i.e. the latency a caller sees beyond the group-commit wait',
  buckets: [0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 3],
});

export const intakeBatchEvents = histogram({
  name: 'spillway_intake_batch_events',
  help: 'Events per group commit',
  buckets: [1, 2, 4, 8, 16, 32, 64, 128, 256],
});

export const spillProducedTotal = counter({
  name: 'spillway_spill_produced_total',
  help: 'Spill records acknowledged by Kafka (new spills and re-appends)',
});

export const spillReappendedTotal = counter({
  name: 'spillway_spill_reappended_total',
  help: 'Blocked spill records the drainer re-appended to the tail of the topic (churn of paused/saturated backlogs)',
});

export const spillAdmittedTotal = counter({
  name: 'spillway_spill_admitted_total',
  help: 'Spill records the drainer brought back into memory (a credit was free)',
});

export const spillLookaheadRecords = gauge({
  name: 'spillway_spill_lookahead_records',
  help: "Spill records currently held in the drainers' per-partition look-ahead (not yet resolved)",
});

export const creditsUsedGauge = gauge({
  name: 'spillway_router_credits_used',
  help: 'Credits in use per tenant, summed over the workers of this process',
  labelNames: ['tenant'],
  collect() {
    this.reset();
    const sum = new Map<string, number>();
    for (const s of sources)
      for (const [tenantId, n] of s.creditsUsed()) sum.set(tenantId, (sum.get(tenantId) ?? 0) + n);
    for (const [tenantId, n] of sum) this.set({ tenant: tenantId }, n);
  },
});

export const tasksInMemoryGauge = gauge({
  name: 'spillway_router_tasks_in_memory',
  help: 'Delivery tasks held in memory by the workers of this process',
  collect() {
    let n = 0;
    for (const s of sources) n += s.tasksInMemory();
    this.set(n);
  },
});

export const bodyBytesGauge = gauge({
  name: 'spillway_router_body_bytes',
  help: 'Event body bytes held in memory by admitted delivery tasks of the workers of this process (bounded by SPILLWAY_WORKER_BODY_BUDGET)',
  collect() {
    let n = 0;
    for (const s of sources) n += s.bodyBytes();
    this.set(n);
  },
});

export const retryJobsTotal = counter({
  name: 'spillway_retry_jobs_scheduled_total',
  help: 'Delayed BullMQ retry jobs added (one job carries every task of one flush window and delay bucket)',
});

export const retryTasksTotal = counter({
  name: 'spillway_retry_tasks_scheduled_total',
  help: 'Delivery tasks handed to retry jobs',
});

export const dlqWritesTotal = counter({
  name: 'spillway_dlq_writes_total',
  help: 'Deliveries written to a tenant DLQ (last attempt failed, or a permanent failure)',
});

import { channel } from 'node:diagnostics_channel';

/**
 * Named `node:diagnostics_channel` channels, `spillway:<pkg>:<event>`. Tracing and metrics
 * subscribe to them (`diagnostics_channel.subscribe(CHANNELS.spill, fn)`) without touching the hot
 * path: publishers build a message only when `hasSubscribers` is true.
 */
export const CHANNELS = {
  /** A group commit of the durable intake ended (router, intake/intake.ts). */
  intakeCommit: 'spillway:router:intake-commit',
  /** Tasks were acknowledged by the spill log (router, spill/producer.ts). */
  spill: 'spillway:router:spill',
  /** One outbound delivery attempt ended (delivery, dispatcher.ts). */
  deliveryAttempt: 'spillway:delivery:attempt',
  /** An endpoint circuit breaker changed state (delivery, breakers.ts). */
  breakerChange: 'spillway:delivery:breaker-change',
} as const;

export interface IntakeCommitMessage {
  /** Events in the group commit. */
  events: number;
  /** committed = one intake job added; failed = every caller got 503; duplicate = nothing new. */
  outcome: 'committed' | 'failed' | 'duplicate';
  durationMs: number;
  /** Ids of the events made durable by this commit (empty unless committed). */
  eventIds: { tenantId: string; eventId: string }[];
  error?: unknown;
}

export interface SpillMessage {
  /** Records Kafka acknowledged in one send. */
  records: number;
  bytes: number;
  tasks: { tenantId: string; eventId: string; endpointId: string }[];
}

export interface DeliveryAttemptMessage {
  tenantId: string;
  endpointId: string;
  eventId: string;
  attempt: number;
  outcome: string;
  status?: number;
  durationMs: number;
  /** Set when the event went in a batch: the request's `webhook-id` (one message per event of it). */
  batchId?: string;
}

export interface BreakerChangeMessage {
  tenantId: string;
  endpointId: string;
  state: 'closed' | 'open' | 'half-open';
}

/** The channel objects, typed by message (publish only when `hasSubscribers`). */
export const channels = {
  intakeCommit: channel(CHANNELS.intakeCommit) as unknown as TypedChannel<IntakeCommitMessage>,
  spill: channel(CHANNELS.spill) as unknown as TypedChannel<SpillMessage>,
  deliveryAttempt: channel(CHANNELS.deliveryAttempt) as unknown as TypedChannel<DeliveryAttemptMessage>,
  breakerChange: channel(CHANNELS.breakerChange) as unknown as TypedChannel<BreakerChangeMessage>,
};

export interface TypedChannel<M> {
  readonly hasSubscribers: boolean;
  publish(message: M): void;
  subscribe(fn: (message: unknown, name: string | symbol) => void): void;
  unsubscribe(fn: (message: unknown, name: string | symbol) => void): unknown;
}

import type { WireEvent } from '../worker/fanout.ts';

/** Outcome of one attempt as the history keeps it. */
export type AttemptState = 'delivered' | 'retrying' | 'failed';

/** A logged event (the events topic): the event as it was accepted, and who it was fanned out to. */
export interface EventRecord extends WireEvent {
  /** Endpoint ids the event was fanned out to. */
  p: string[];
  /** When it was logged (ms). */
  at: number;
}

/** One attempt (the attempts topic). */
export interface AttemptRecord {
  t: string;
  /** Event id. */
  i: string;
  /** Endpoint id. */
  p: string;
  /** Attempt number (1-based; a resend starts at 1 again and carries `rs`). */
  n: number;
  /** When the attempt ended (ms). */
  at: number;
  /** Latency (ms). */
  ms: number;
  o: AttemptState;
  /** HTTP status, when the endpoint answered. */
  st?: number;
  /** Why it did not deliver (`http_503`, `timeout`, `endpoint_disabled`, ...). */
  er?: string;
  /** First 1 KiB of the response body (UTF-8, invalid bytes replaced). */
  x?: string;
  /** When the next attempt is due (ms), for `retrying`. */
  nx?: number;
  /** The resend or recover operation this attempt belongs to. */
  rs?: string;
  /** 1: made long after the event was accepted (a pause, a backlog): indexed like a later attempt. */
  lt?: 1;
}

/** The short form of an attempt in the per-endpoint sorted sets (member JSON; score = `at`). */
export type AttemptMember = [
  eventId: string,
  n: number,
  code: string,
  ms: number,
  at: number,
  /** d = delivered, r = retrying, f = failed (dead-lettered). */
  o: 'd' | 'r' | 'f',
  rs?: string,
];

export function attemptMember(a: AttemptRecord): string {
  const m: AttemptMember = [a.i, a.n, a.er ?? String(a.st ?? ''), a.ms, a.at, a.o[0] as 'd' | 'r' | 'f'];
  if (a.rs) m.push(a.rs);
  return JSON.stringify(m);
}

/**
 * The records of one history message. The writer packs a tenant's records of one flush and one
 * minute into one Kafka message (a JSON array, docs/storage.md); a message holding one bare record
 * is read as a batch of one.
 */
export function unpackRecords<T>(value: Buffer): T[] {
  const v = JSON.parse(value.toString()) as T | T[];
  return Array.isArray(v) ? v : [v];
}

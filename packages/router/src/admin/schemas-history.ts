/**
 * JSON schemas of the history routes (./routes-history.ts): the event log, attempts, resend and
 * recover operations, test sends. Same conventions as ./schemas.ts.
 */
import { ID_PATTERN } from './schemas.ts';

const id = { type: 'string', pattern: ID_PATTERN } as const;
const time = {
  type: 'string',
  maxLength: 40,
  description: 'ISO-8601 time (2026-12-01T14:00:00Z) or unix milliseconds',
} as const;
const cursor = { type: 'string', maxLength: 400, description: 'the `next` of the previous page' } as const;
const limit = { type: 'string', pattern: '^[1-9][0-9]{0,2}$', description: '1-100, default 50' } as const;

export const eventsQuery = {
  type: 'object',
  additionalProperties: false,
  properties: {
    since: time,
    until: time,
    type: { type: 'string', maxLength: 200 },
    status: { type: 'string', enum: ['pending', 'delivered', 'retrying', 'failed'] },
    cursor,
    limit,
  },
} as const;

export const pageQuery = {
  type: 'object',
  additionalProperties: false,
  properties: { cursor, limit },
} as const;

export const endpointAttemptsQuery = {
  type: 'object',
  additionalProperties: false,
  properties: {
    status: {
      type: 'string',
      enum: ['delivered', 'failed'],
      description: 'failed: every attempt that did not deliver',
    },
    since: time,
    until: time,
    cursor,
    limit,
  },
} as const;

export const attemptSchema = {
  type: 'object',
  required: ['eventId', 'endpointId', 'attempt', 'at', 'status', 'latencyMs'],
  properties: {
    eventId: id,
    endpointId: id,
    attempt: { type: 'integer', description: '1-based; a resend starts at 1 and names its operation' },
    at: { type: 'string', format: 'date-time' },
    status: { type: 'string', enum: ['delivered', 'failed'], description: 'what this attempt came to' },
    deadLettered: { type: 'boolean', description: 'the last attempt of its delivery: it went to the DLQ' },
    httpStatus: { type: 'integer' },
    error: { type: 'string', description: 'http_503, timeout, connect_error: ..., endpoint_disabled, ...' },
    latencyMs: { type: 'integer' },
    response: { type: 'string', description: 'first 1 KiB of the response body' },
    nextAt: { type: 'string', format: 'date-time', description: 'when the next attempt is due' },
    operation: { type: 'string', description: 'the resend or recover this attempt belongs to' },
  },
} as const;

export const loggedEventSchema = {
  type: 'object',
  required: ['id', 'type', 'receivedAt', 'loggedAt', 'endpoints', 'status'],
  properties: {
    id: { type: 'string' },
    type: { type: 'string' },
    receivedAt: { type: 'string', format: 'date-time' },
    loggedAt: { type: 'string', format: 'date-time', description: 'when a worker fanned it out' },
    endpoints: { type: 'array', items: id },
    status: { type: 'string', enum: ['pending', 'delivered', 'retrying', 'failed'] },
  },
} as const;

/** `{"data":[...],"next"?}` */
export function page(items: object): object {
  return {
    type: 'object',
    required: ['data'],
    properties: {
      data: { type: 'array', items },
      next: { type: 'string', description: 'absent on the last page' },
    },
  };
}

const requestId = {
  type: 'string',
  pattern: '^[A-Za-z0-9_.:-]{1,100}$',
  description: 'idempotency key (or the Idempotency-Key header): the same id gives back the same operation',
} as const;

export const resendBody = {
  type: 'object',
  additionalProperties: false,
  properties: { endpointId: id, requestId },
} as const;

export const recoverBody = {
  type: 'object',
  additionalProperties: false,
  required: ['since'],
  properties: { since: time, requestId },
} as const;

export const operationSchema = {
  type: 'object',
  required: ['id', 'kind', 'tenantId', 'state', 'total', 'enqueued', 'delivered', 'failed', 'createdAt'],
  properties: {
    id: { type: 'string' },
    kind: { type: 'string', enum: ['resend', 'recover'] },
    tenantId: id,
    eventId: { type: 'string' },
    endpointId: id,
    since: { type: 'string', format: 'date-time' },
    state: {
      type: 'string',
      enum: ['running', 'enqueued', 'failed'],
      description: 'running: handing deliveries to the queue; enqueued: all handed over',
    },
    total: { type: 'integer', description: 'deliveries it covers' },
    enqueued: { type: 'integer', description: 'handed to the retry queue so far' },
    delivered: { type: 'integer', description: 'of those, delivered' },
    failed: { type: 'integer', description: 'of those, failed for good again' },
    createdAt: { type: 'string', format: 'date-time' },
    error: { type: 'string' },
  },
} as const;

export const tidOpParams = {
  type: 'object',
  required: ['tid', 'opid'],
  properties: { tid: id, opid: { type: 'string', pattern: '^[A-Za-z0-9_.:-]{1,100}$' } },
} as const;

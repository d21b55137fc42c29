import type { DeliveryTask } from '@spillway/delivery';
import type { Endpoint, SpillwayEvent } from '@spillway/shared';
import { matchesEventType } from '../config/store.ts';

/**
 * One delivery of one event to one endpoint (the type is delivery's): the unit that is held in a
 * worker's memory (with a credit), spilled to Kafka, carried by a retry job, or parked in the DLQ.
 */
export type { DeliveryTask };

/** The JSON form of an event (body as base64): BullMQ job data, Kafka values, DLQ entries. */
export interface WireEvent {
  t: string;
  i: string;
  y: string;
  r: number;
  c: string;
  b: string;
  s?: string;
}

/** The JSON form of a task. */
export interface WireTask {
  e: WireEvent;
  p: string;
  a: number;
}

/**
 * The base64 form a body arrived in (job data, spill record), kept while the body lives: a task
 * that is spilled, re-appended or dead-lettered is written with it instead of encoding the body
 * again (once per task: ten times for an event fanned out to ten endpoints).
 */
const wireBodies = new WeakMap<Buffer, string>();
/** Larger bodies are not cached: their string would sit in the V8 heap beside the Buffer. */
const WIRE_CACHE_MAX = 64 * 1024;

export function eventToWire(ev: SpillwayEvent): WireEvent {
  let b = wireBodies.get(ev.body);
  if (b === undefined) {
    b = ev.body.toString('base64');
    if (ev.body.length <= WIRE_CACHE_MAX) wireBodies.set(ev.body, b);
  }
  const w: WireEvent = {
    t: ev.tenantId,
    i: ev.id,
    y: ev.type,
    r: ev.receivedAt,
    c: ev.contentType,
    b,
  };
  if (ev.sourceId !== undefined) w.s = ev.sourceId;
  return w;
}

export function eventFromWire(w: WireEvent): SpillwayEvent {
  const ev: SpillwayEvent = {
    tenantId: w.t,
    id: w.i,
    type: w.y,
    receivedAt: w.r,
    contentType: w.c,
    body: Buffer.from(w.b, 'base64'),
  };
  if (ev.body.length <= WIRE_CACHE_MAX) wireBodies.set(ev.body, w.b);
  if (w.s !== undefined) ev.sourceId = w.s;
  return ev;
}

export function taskToWire(t: DeliveryTask): WireTask {
  return { e: eventToWire(t.event), p: t.endpointId, a: t.attempt };
}

export function taskFromWire(w: WireTask): DeliveryTask {
  const event = eventFromWire(w.e);
  return { tenantId: event.tenantId, eventId: event.id, endpointId: w.p, attempt: w.a, event };
}

/** The endpoints an event goes to: not disabled, and subscribed to its type. Paused ones are kept (their tasks wait). */
export function subscribedEndpoints(endpoints: readonly Endpoint[], type: string): Endpoint[] {
  return endpoints.filter((ep) => ep.status !== 'disabled' && matchesEventType(ep.eventTypes, type));
}

/** Fans one event out into one task per subscribed endpoint, each at attempt 1. */
export function fanOut(event: SpillwayEvent, endpoints: readonly Endpoint[]): DeliveryTask[] {
  return subscribedEndpoints(endpoints, event.type).map((ep) => ({
    tenantId: event.tenantId,
    eventId: event.id,
    endpointId: ep.id,
    attempt: 1,
    event,
  }));
}

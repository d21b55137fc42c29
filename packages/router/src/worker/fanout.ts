import type { DeliveryTask as DispatchTask } from '@spillway/delivery';
import type { Endpoint, SpillwayEvent } from '@spillway/shared';
import { matchesEventType } from '../config/store.ts';

/**
 * One delivery of one event to one endpoint (the type is delivery's): the unit that is held in a
 * worker's memory (with a credit), spilled to Kafka, carried by a retry job, or parked in the DLQ.
 */
export type DeliveryTask = DispatchTask & {
  /** The resend or recover operation that made this task (its attempts say so in the history). */
  resend?: string;
  /**
   * Endpoint.gen of the endpoint incarnation the task was made for. A worker discards the task
   * when its endpoint's gen is another (deleted and created again under the same id, itself or
   * with its tenant: endpoints die with their tenant, so this one stamp covers both). Absent on
   * tasks made before incarnations existed, or for an endpoint without one: those run.
   */
  gen?: string;
};

/** The JSON form of an event (body as base64): BullMQ job data, Kafka values, DLQ entries. */
export interface WireEvent {
  t: string;
  i: string;
  y: string;
  r: number;
  c: string;
  b: string;
  s?: string;
  /** orderingKey */
  k?: string;
}

/** The JSON form of a task. */
export interface WireTask {
  e: WireEvent;
  p: string;
  a: number;
  /** DeliveryTask.resend */
  rs?: string;
  /** DeliveryTask.gen (absent on tasks written before incarnations existed) */
  g?: string;
}

/**
 * The base64 form a body arrived in (job data, spill record), kept on the event while it lives: a
 * task that is spilled, re-appended or dead-lettered is written with it instead of encoding the
 * body again (once per task: ten times for an event fanned out to ten endpoints). A property of the
 * event object, not a WeakMap entry: one ephemeron per event in flight was GC work on every delivery.
 */
const WIRE_BODY = Symbol('spillway.wireBody');
type WiredEvent = SpillwayEvent & { [WIRE_BODY]?: string };
/** Larger bodies are not cached: their string would sit in the V8 heap beside the Buffer. */
const WIRE_CACHE_MAX = 64 * 1024;

export function eventToWire(ev: SpillwayEvent): WireEvent {
  let b = (ev as WiredEvent)[WIRE_BODY];
  if (b === undefined) {
    b = ev.body.toString('base64');
    if (ev.body.length <= WIRE_CACHE_MAX) (ev as WiredEvent)[WIRE_BODY] = b;
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
  if (ev.orderingKey !== undefined) w.k = ev.orderingKey;
  return w;
}

export function eventFromWire(w: WireEvent): SpillwayEvent {
  const body = Buffer.from(w.b, 'base64');
  const ev: WiredEvent = {
    tenantId: w.t,
    id: w.i,
    type: w.y,
    receivedAt: w.r,
    contentType: w.c,
    body,
    [WIRE_BODY]: body.length <= WIRE_CACHE_MAX ? w.b : undefined,
  };
  if (w.s !== undefined) ev.sourceId = w.s;
  if (w.k !== undefined) ev.orderingKey = w.k;
  return ev;
}

export function taskToWire(t: DeliveryTask): WireTask {
  const w: WireTask = { e: eventToWire(t.event), p: t.endpointId, a: t.attempt };
  if (t.resend !== undefined) w.rs = t.resend;
  if (t.gen !== undefined) w.g = t.gen;
  return w;
}

export function taskFromWire(w: WireTask): DeliveryTask {
  const event = eventFromWire(w.e);
  const t: DeliveryTask = {
    tenantId: event.tenantId,
    eventId: event.id,
    endpointId: w.p,
    attempt: w.a,
    event,
  };
  if (w.rs !== undefined) t.resend = w.rs;
  if (w.g !== undefined) t.gen = w.g;
  return t;
}

/**
 * The endpoints an event goes to: subscribed to its type, and not disabled before the event was
 * accepted. Paused ones are kept (their tasks wait). One disabled after it (a 410 while the event
 * waited in its intake job) is kept too: the engine puts its task in the DLQ as `endpoint_disabled`,
 * so whether an accepted event reaches the DLQ does not depend on when its job was taken apart.
 */
export function subscribedEndpoints(
  endpoints: readonly Endpoint[],
  type: string,
  receivedAt: number,
): Endpoint[] {
  return endpoints.filter(
    (ep) =>
      (ep.status !== 'disabled' || (ep.disabledAt !== undefined && receivedAt < ep.disabledAt)) &&
      matchesEventType(ep.eventTypes, type),
  );
}

/** Fans one event out into one task per subscribed endpoint, each at attempt 1, stamped with its incarnation. */
export function fanOut(event: SpillwayEvent, endpoints: readonly Endpoint[]): DeliveryTask[] {
  return subscribedEndpoints(endpoints, event.type, event.receivedAt).map((ep) => {
    const t: DeliveryTask = {
      tenantId: event.tenantId,
      eventId: event.id,
      endpointId: ep.id,
      attempt: 1,
      event,
    };
    if (ep.gen !== undefined) t.gen = ep.gen;
    return t;
  });
}

/**
 * Whether a task belongs to another incarnation of its endpoint than `ep` (the endpoint, or its
 * tenant, was deleted and created again under the same id since the task was made). A task or
 * endpoint without a gen (from before incarnations existed) cannot tell: it counts as current.
 */
export function staleTask(task: Pick<DeliveryTask, 'gen'>, ep: Pick<Endpoint, 'gen'>): boolean {
  return task.gen !== undefined && ep.gen !== undefined && task.gen !== ep.gen;
}

import { createHash } from 'node:crypto';
import type { SpillwayEvent } from '@spillway/shared';

/**
 * The body of a batched delivery: a JSON array with one element per event, in the order the
 * events were taken,
 *
 *   {"id":"evt_1","type":"order.created","timestamp":"2026-12-01T10:00:00.000Z","payload":{...}}
 *
 * `payload` is the event's bytes as they were accepted when they are JSON (every events-API event,
 * and provider bodies whose content type is JSON and that parse); any other body is carried as
 * `"contentType":"...","payloadBase64":"..."` so the array stays JSON and the bytes stay exact.
 * `timestamp` is when Spillway accepted the event (ISO 8601, UTC).
 */

/** Bytes an element adds to the array besides its payload: keys, quotes, id, type, timestamp. */
const ELEMENT_OVERHEAD = 64;

/** What one event adds to a batch body, near enough to hold batches under `maxBytes`. */
export function batchElementBytes(event: SpillwayEvent): number {
  const payload = jsonPayload(event) ? event.body.length : Math.ceil(event.body.length / 3) * 4 + 40;
  return ELEMENT_OVERHEAD + event.id.length + event.type.length + payload;
}

/** Whether the body goes into the array as it is (JSON), or base64 with its content type. */
function jsonPayload(event: SpillwayEvent): boolean {
  const ct = event.contentType.toLowerCase();
  if (!(ct.startsWith('application/json') || /^[a-z]+\/[a-z0-9.+-]*\+json/.test(ct))) return false;
  // The events API writes the JSON itself; a provider's body claims JSON and is checked once.
  if (event.sourceId === undefined) return true;
  try {
    JSON.parse(event.body.toString('utf8'));
    return true;
  } catch {
    return false;
  }
}

export function batchBody(events: readonly SpillwayEvent[]): Buffer {
  const parts: Buffer[] = [Buffer.from('[')];
  events.forEach((ev, i) => {
    const head = `${i === 0 ? '' : ','}{"id":${JSON.stringify(ev.id)},"type":${JSON.stringify(ev.type)},"timestamp":"${new Date(ev.receivedAt).toISOString()}",`;
    if (jsonPayload(ev)) parts.push(Buffer.from(`${head}"payload":`), ev.body, Buffer.from('}'));
    else
      parts.push(
        Buffer.from(
          `${head}"contentType":${JSON.stringify(ev.contentType)},"payloadBase64":"${ev.body.toString('base64')}"}`,
        ),
      );
  });
  parts.push(Buffer.from(']'));
  return Buffer.concat(parts);
}

/**
 * The batch's `webhook-id`: `batch_` + a digest of the endpoint and the event ids, so the same
 * events sent again to the same endpoint (a retry of the whole batch) carry the same id.
 */
export function batchId(endpointId: string, eventIds: readonly string[]): string {
  const h = createHash('sha256').update(endpointId);
  for (const id of eventIds) h.update('\n').update(id);
  return `batch_${h.digest('base64url').slice(0, 24)}`;
}

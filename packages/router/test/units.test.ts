import {
  Credits,
  eventFromWire,
  eventToWire,
  fanOut,
  taskFromWire,
  taskToWire,
} from '@spillway/router/testing';
import type { Endpoint } from '@spillway/shared';
import { describe, expect, it } from 'vitest';
import { matchesEventType } from '../src/index.ts';

const ep = (id: string, eventTypes: string[], status: Endpoint['status'] = 'active'): Endpoint => ({
  id,
  tenantId: 'acme',
  url: 'http://127.0.0.1:1/',
  eventTypes,
  secret: 'whsec_x',
  timeoutMs: 1000,
  status,
  createdAt: '2026-01-01T00:00:00.000Z',
});

describe('credits', () => {
  it('caps each tenant at its limit independently and counts releases', () => {
    const c = new Credits();
    for (let i = 0; i < 3; i++) expect(c.tryTake('a', 3)).toBe(true);
    expect(c.tryTake('a', 3)).toBe(false);
    expect(c.tryTake('b', 3)).toBe(true);
    expect(c.used('a')).toBe(3);
    let woken = 0;
    const off = c.onRelease(() => woken++);
    c.release('a');
    expect(c.used('a')).toBe(2);
    expect(c.tryTake('a', 3)).toBe(true);
    off();
    c.release('a');
    expect(woken).toBe(1);
  });

  it('a lowered limit applies to the next take; a double release is a bug and throws', () => {
    const c = new Credits();
    c.tryTake('a', 5);
    c.tryTake('a', 5);
    expect(c.tryTake('a', 2)).toBe(false);
    c.release('a');
    c.release('a');
    expect(() => c.release('a')).toThrow(/released twice/);
  });
});

describe('event type matching and fan-out', () => {
  it('matches *, prefix.* (any depth) and exact types only', () => {
    expect(matchesEventType(['*'], 'anything')).toBe(true);
    expect(matchesEventType(['order.*'], 'order.created')).toBe(true);
    expect(matchesEventType(['order.*'], 'order.item.added')).toBe(true);
    expect(matchesEventType(['order.*'], 'orders.created')).toBe(false);
    expect(matchesEventType(['order.*'], 'order')).toBe(false);
    expect(matchesEventType(['user.created'], 'user.created')).toBe(true);
    expect(matchesEventType(['user.created'], 'user.deleted')).toBe(false);
    expect(matchesEventType([], 'x')).toBe(false);
  });

  it('fans out to subscribed endpoints, skips disabled ones, keeps paused ones (their tasks wait)', () => {
    const event = {
      tenantId: 'acme',
      id: 'e1',
      type: 'order.created',
      receivedAt: 1,
      contentType: 'application/json',
      body: Buffer.from('{}'),
    };
    const tasks = fanOut(event, [
      ep('all', ['*']),
      ep('orders', ['order.*']),
      ep('users', ['user.*']),
      ep('off', ['*'], 'disabled'),
      ep('held', ['*'], 'paused'),
    ]);
    expect(tasks.map((t) => t.endpointId)).toEqual(['all', 'orders', 'held']);
    expect(tasks.every((t) => t.attempt === 1 && t.eventId === 'e1')).toBe(true);
  });

  it('an endpoint disabled after an event was accepted still gets its task (the engine puts it in the DLQ as endpoint_disabled); one disabled before does not', () => {
    const at = (receivedAt: number) => ({
      tenantId: 'acme',
      id: `e${receivedAt}`,
      type: 'order.created',
      receivedAt,
      contentType: 'application/json',
      body: Buffer.from('{}'),
    });
    const gone = { ...ep('gone', ['*'], 'disabled'), disabledAt: 1_000 };
    const endpoints = [ep('all', ['*']), gone, ep('old', ['*'], 'disabled')];
    expect(fanOut(at(999), endpoints).map((t) => t.endpointId)).toEqual(['all', 'gone']);
    expect(fanOut(at(1_000), endpoints).map((t) => t.endpointId)).toEqual(['all']);
  });

  it('tasks survive the wire form byte for byte (spill records, retry jobs, DLQ)', () => {
    const body = Buffer.from([0, 1, 2, 255, 0x7b]);
    const event = {
      tenantId: 'acme',
      id: 'e2',
      type: 't',
      receivedAt: 42,
      contentType: 'application/octet-stream',
      body,
      sourceId: 'gh',
    };
    expect(eventFromWire(eventToWire(event))).toEqual(event);
    const task = { tenantId: 'acme', eventId: 'e2', endpointId: 'ep', attempt: 3, event };
    expect(taskFromWire(JSON.parse(JSON.stringify(taskToWire(task))))).toEqual(task);
  });
});

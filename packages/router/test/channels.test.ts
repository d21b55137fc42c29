import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { SpillProducer } from '@spillway/router/testing';
import { CHANNELS, type IntakeCommitMessage, type SpillMessage } from '@spillway/shared';
import { afterEach, describe, expect, it } from 'vitest';
import { makeEvent, routerRuntime } from '../../../test/helpers/router-fixtures.ts';
import { createIntake, ensureSpillTopic } from '../src/index.ts';

const cleanup: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

/** Subscribes to one channel for the test's duration; returns the messages seen. */
function listen<M>(name: string): M[] {
  const seen: M[] = [];
  const fn = (m: unknown) => seen.push(m as M);
  subscribe(name, fn);
  cleanup.push(() => void unsubscribe(name, fn));
  return seen;
}

describe('diagnostics channels', () => {
  it('spillway:router:intake-commit carries each group commit: outcome, size and the durable ids', async () => {
    const seen = listen<IntakeCommitMessage>(CHANNELS.intakeCommit);
    const rt = routerRuntime();
    const intake = createIntake(rt);
    cleanup.push(async () => {
      await intake.close();
      await rt.close();
    });
    await Promise.all([intake.submit(makeEvent('acme', 'c1')), intake.submit(makeEvent('acme', 'c2'))]);
    await intake.submit(makeEvent('acme', 'c1')); // a duplicate: a commit with nothing new
    const committed = seen.filter((m) => m.outcome === 'committed');
    expect(committed.flatMap((m) => m.eventIds).map((e) => e.eventId)).toEqual(['c1', 'c2']);
    expect(committed.every((m) => m.durationMs >= 0 && m.events >= 1)).toBe(true);
    expect(seen.at(-1)).toMatchObject({ outcome: 'duplicate', events: 1, eventIds: [] });
  });

  it('spillway:router:spill carries every send Kafka acknowledged, with its tasks', async () => {
    const seen = listen<SpillMessage>(CHANNELS.spill);
    const rt = routerRuntime();
    await ensureSpillTopic(rt);
    const producer = new SpillProducer(rt.kafka, rt.config.spillTopic, rt.logger);
    cleanup.push(async () => {
      await producer.close();
      await rt.close();
    });
    const task = (i: number) => ({
      tenantId: 'acme',
      endpointId: 'ep1',
      eventId: `s${i}`,
      attempt: 1,
      event: makeEvent('acme', `s${i}`),
    });
    await Promise.all([producer.spill(task(1)), producer.spill(task(2))]);
    expect(seen.reduce((n, m) => n + m.records, 0)).toBe(2);
    expect(seen.flatMap((m) => m.tasks).map((t) => t.eventId)).toEqual(['s1', 's2']);
    expect(seen.every((m) => m.bytes > 0)).toBe(true);
  });
});

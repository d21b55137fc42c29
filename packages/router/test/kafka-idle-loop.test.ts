import { createRequire } from 'node:module';
import type { Kafka as KafkaType } from 'kafkajs';
import { afterAll, describe, expect, it } from 'vitest';
import { randomPrefix } from '../../../test/helpers/env.ts';

// kafkajs as the router loads it, with patches/kafkajs@2.2.4.patch applied by pnpm install.
const require = createRequire(new URL('../src/index.ts', import.meta.url));
const { Kafka, logLevel } = require('kafkajs') as typeof import('kafkajs');

const BROKERS = (process.env.SPILLWAY_KAFKA_BROKERS ?? '127.0.0.1:9092').split(',');

/** Timers kafkajs's request queue arms within `ms`, counted by wrapping the global setTimeout. */
async function requestQueueTimers(ms: number): Promise<number> {
  const real = globalThis.setTimeout;
  let n = 0;
  globalThis.setTimeout = ((fn: (...a: unknown[]) => void, delay?: number, ...rest: unknown[]) => {
    if (new Error().stack?.includes('requestQueue')) n++;
    return real(fn, delay, ...rest);
  }) as typeof setTimeout;
  try {
    await new Promise((r) => real(r, ms));
  } finally {
    globalThis.setTimeout = real;
  }
  return n;
}

describe('kafkajs request queue (patched: no timer loop on an idle connection)', () => {
  const kafka: KafkaType = new Kafka({
    clientId: randomPrefix('idle'),
    brokers: BROKERS,
    logLevel: logLevel.NOTHING,
  });
  const admin = kafka.admin();
  afterAll(() => admin.disconnect());

  it('arms no timers while nothing is pending, after its connection answered requests', async () => {
    await admin.connect();
    // Requests answered on the connection: unpatched, each response starts a 1 ms timer that arms
    // the next one for as long as the connection lives (~1,000 timers a second per connection).
    await admin.listTopics();
    await admin.describeCluster();
    const idle = await requestQueueTimers(300);
    expect(idle).toBeLessThan(5);
    // The connection still works: a request after the idle period is sent and answered.
    await expect(admin.describeCluster()).resolves.toMatchObject({ brokers: expect.any(Array) });
  });
});

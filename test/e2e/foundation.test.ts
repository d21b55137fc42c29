import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { Kafka, logLevel } from 'kafkajs';
import { afterAll, describe, expect, it } from 'vitest';
import { testEnv } from '../helpers/env.ts';
import { spawnSpillway } from '../helpers/spawn.ts';
import { waitFor } from '../helpers/wait.ts';

const redisUrl = process.env.SPILLWAY_REDIS_URL ?? 'redis://127.0.0.1:6390';
const brokers = (process.env.SPILLWAY_KAFKA_BROKERS ?? '127.0.0.1:9092').split(',');

describe('the services the suite runs against', () => {
  const redis = new Redis(redisUrl);
  afterAll(() => redis.disconnect());

  it('Redis is >= 7.0.8 with AOF everysec and noeviction, and writes reach the AOF', async () => {
    const info = await redis.info('server');
    const [a, b, c] = /redis_version:(\S+)/.exec(info)![1]!.split('.').map(Number);
    expect(a! * 1e6 + b! * 1e3 + c!).toBeGreaterThanOrEqual(7_000_008);
    expect(await redis.config('GET', 'appendonly')).toEqual(['appendonly', 'yes']);
    expect(await redis.config('GET', 'appendfsync')).toEqual(['appendfsync', 'everysec']);
    expect(await redis.config('GET', 'maxmemory-policy')).toEqual(['maxmemory-policy', 'noeviction']);
    const before = Number(/aof_last_write_status:ok/.test(await redis.info('persistence')));
    const key = `foundation:${randomBytes(4).toString('hex')}`;
    await redis.set(key, 'durable', 'EX', 60);
    const persistence = await redis.info('persistence');
    expect(before).toBe(1);
    expect(persistence).toMatch(/aof_enabled:1/);
    expect(await redis.get(key)).toBe('durable');
  });

  it('Kafka answers a produce/consume round trip (acks=-1)', async () => {
    const kafka = new Kafka({ clientId: 'foundation-test', brokers, logLevel: logLevel.NOTHING });
    const topic = `foundation-${randomBytes(4).toString('hex')}`;
    const admin = kafka.admin();
    await admin.connect();
    await admin.createTopics({
      waitForLeaders: true,
      topics: [{ topic, numPartitions: 1, replicationFactor: 1 }],
    });
    const producer = kafka.producer({ idempotent: true });
    await producer.connect();
    const sent = Array.from({ length: 10 }, (_, i) => ({ key: 'acme', value: `m${i}` }));
    await producer.send({ topic, acks: -1, messages: sent });
    const consumer = kafka.consumer({ groupId: `${topic}-g` });
    await consumer.connect();
    await consumer.subscribe({ topic, fromBeginning: true });
    const got: string[] = [];
    await consumer.run({ eachMessage: async ({ message }) => void got.push(String(message.value)) });
    await waitFor(() => got.length >= 10, 'ten messages back', 30_000);
    expect(got).toEqual(sent.map((m) => m.value));
    await consumer.disconnect();
    await producer.disconnect();
    await admin.deleteTopics({ topics: [topic] }).catch(() => {});
    await admin.disconnect();
  });
});

describe('spillway start', () => {
  it('SPILLWAY_REDIS_URL=nope exits non-zero with one line naming the variable', async () => {
    const p = spawnSpillway(['start'], testEnv({ SPILLWAY_REDIS_URL: 'nope' }));
    expect(await p.exited).toBe(1);
    const lines = p.stderr().trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain('SPILLWAY_REDIS_URL');
  });

  it('SPILLWAY_SPILL_REPLICATION above the broker count exits non-zero with one line naming it', async () => {
    // The local cluster has one broker: three replicas cannot be placed.
    const p = spawnSpillway(['start', '--role', 'worker'], testEnv({ SPILLWAY_SPILL_REPLICATION: '3' }));
    expect(await p.exited).toBe(1);
    const lines = p.stderr().trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain('SPILLWAY_SPILL_REPLICATION');
    expect(lines[0]).toContain('1 broker');
  });

  it('a missing SPILLWAY_ADMIN_TOKEN exits non-zero with one line naming it', async () => {
    const env = testEnv();
    delete (env as Record<string, string | undefined>).SPILLWAY_ADMIN_TOKEN;
    const p = spawnSpillway(['start'], env);
    expect(await p.exited).toBe(1);
    expect(p.stderr().trim().split('\n')).toHaveLength(1);
    expect(p.stderr()).toContain('SPILLWAY_ADMIN_TOKEN');
  });

  it('without SPILLWAY_SECRET_KEY start runs and says in one warning that secrets are unencrypted; a malformed one exits non-zero naming it, never echoing it', async () => {
    const env = testEnv({ SPILLWAY_ADMIN_PORT: '0', SPILLWAY_LOG_LEVEL: 'warn' });
    delete (env as Record<string, string | undefined>).SPILLWAY_SECRET_KEY;
    const missing = spawnSpillway(['start', '--role', 'admin'], env);
    try {
      await waitFor(
        () => /admin:\s+http/.test(missing.stdout()),
        'admin role to start without a secret key',
        30_000,
      );
      const all = missing.stdout() + missing.stderr();
      expect(all.match(/SPILLWAY_SECRET_KEY is not set/g)).toHaveLength(1);
    } finally {
      missing.child.kill('SIGTERM');
      await missing.exited;
    }
    // 31 bytes: one short.
    const short = randomBytes(31).toString('hex');
    for (const [name, value] of [
      ['SPILLWAY_SECRET_KEY', short],
      ['SPILLWAY_SECRET_KEY_PREVIOUS', `${randomBytes(32).toString('base64')},${short}`],
    ] as const) {
      const p = spawnSpillway(['start', '--role', 'admin'], testEnv({ [name]: value }));
      expect(await p.exited).toBe(1);
      const lines = p.stderr().trim().split('\n');
      expect(lines).toHaveLength(1);
      expect(lines[0]).toContain(name);
      expect(lines[0]).not.toContain(short);
    }
  });

  it('starts all roles, prints the URLs, and /readyz answers 200 against real Redis and Kafka', async () => {
    const p = spawnSpillway(['start'], testEnv());
    try {
      const port = await waitFor(
        () => /admin:\s+http:\/\/[\d.]+:(\d+)/.exec(p.stdout())?.[1],
        'the admin URL',
        30_000,
      );
      const res = await fetch(`http://127.0.0.1:${port}/readyz`);
      expect(res.status).toBe(200);
      expect(await res.json()).toMatchObject({ redis: true, kafka: true });
      expect((await fetch(`http://127.0.0.1:${port}/healthz`)).status).toBe(200);
      const metrics = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
      expect(metrics).toContain('spillway_process_cpu_user_seconds_total');
    } finally {
      p.child.kill('SIGTERM');
      await p.exited;
    }
  });

  it('start refuses with one line naming SPILLWAY_KAFKA_BROKERS when Kafka does not answer', async () => {
    const p = spawnSpillway(['start'], testEnv({ SPILLWAY_KAFKA_BROKERS: '127.0.0.1:1' }));
    expect(await p.exited).toBe(1);
    expect(p.stderr()).toContain('SPILLWAY_KAFKA_BROKERS');
  });
});

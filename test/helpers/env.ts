import { randomBytes } from 'node:crypto';
import { type Config, loadConfig } from '@spillway/shared';

/** A random namespace per test file so tests never see each other's keys, queues or groups. */
export function randomPrefix(label = 't'): string {
  return `${label}-${randomBytes(4).toString('hex')}`;
}

/**
 * Environment for a Spillway under test: the Redis and Kafka the suite runs against (see
 * vitest.config.ts), a random prefix and spill topic, ports 0, and an admin token.
 */
export function testEnv(overrides: Record<string, string> = {}): Record<string, string> {
  const prefix = randomPrefix();
  return {
    SPILLWAY_REDIS_URL: process.env.SPILLWAY_REDIS_URL ?? 'redis://127.0.0.1:6390',
    SPILLWAY_KAFKA_BROKERS: process.env.SPILLWAY_KAFKA_BROKERS ?? '127.0.0.1:9092',
    SPILLWAY_PREFIX: prefix,
    SPILLWAY_SPILL_TOPIC: `${prefix}.spill`,
    SPILLWAY_HISTORY_TOPIC: `${prefix}.history`,
    SPILLWAY_HISTORY_PARTITIONS: '2',
    SPILLWAY_SPILL_PARTITIONS: '4',
    SPILLWAY_ADMIN_PORT: '0',
    SPILLWAY_INGEST_PORT: '0',
    SPILLWAY_HOST: '127.0.0.1',
    SPILLWAY_ADMIN_TOKEN: `token-${randomBytes(16).toString('hex')}`,
    SPILLWAY_SECRET_KEY: randomBytes(32).toString('base64'),
    SPILLWAY_LOG_LEVEL: process.env.SPILLWAY_LOG_LEVEL ?? 'error',
    ...overrides,
  };
}

export function testConfig(overrides: Record<string, string> = {}): Readonly<Config> {
  return loadConfig(testEnv(overrides));
}

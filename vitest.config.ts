import { defineConfig } from 'vitest/config';

/**
 * Tests that measure a process's memory or CPU under attack, or hold a steady load through
 * restarts, run after everything else, alone: two suites in parallel on a 2-core machine move RSS
 * and timing by more than the bounds they assert.
 */
const ALONE = [
  'test/e2e/ingest-output-bound.test.ts',
  'test/e2e/ingest-tls.test.ts',
  'test/e2e/ingest-handover.test.ts',
];

// Tests run against the real Redis and Kafka that infra/local/test.sh starts (or that the caller
// points them at). Packages resolve to src through their exports maps: nothing is built first.
export default defineConfig({
  test: {
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: 'forks',
    maxWorkers: 2,
    env: {
      SPILLWAY_REDIS_URL: process.env.SPILLWAY_REDIS_URL ?? 'redis://127.0.0.1:6390',
      SPILLWAY_KAFKA_BROKERS: process.env.SPILLWAY_KAFKA_BROKERS ?? '127.0.0.1:9092',
      // Roles started in-process log through pino; keep test output to errors unless asked.
      SPILLWAY_LOG_LEVEL: process.env.SPILLWAY_LOG_LEVEL ?? 'error',
    },
    projects: [
      {
        extends: true,
        test: {
          name: 'suite',
          include: ['packages/*/test/**/*.test.ts', 'test/**/*.test.ts'],
          exclude: ['**/node_modules/**', ...ALONE],
        },
      },
      {
        extends: true,
        test: { name: 'alone', include: ALONE, maxWorkers: 1, sequence: { groupOrder: 1 } },
      },
    ],
  },
});

import { loadConfig } from '@spillway/shared';
import { describe, expect, it } from 'vitest';

/** The worker's failover timing knobs (SPILLWAY_JOB_LOCK, _JOB_STALLED_INTERVAL, _KAFKA_SESSION_TIMEOUT). */
describe('failover timing knobs', () => {
  it('default to 10 s lock, 5 s stalled check, 10 s Kafka session', () => {
    const c = loadConfig({});
    expect(c).toMatchObject({
      jobLockMs: 10_000,
      jobStalledIntervalMs: 5_000,
      kafkaSessionTimeoutMs: 10_000,
    });
  });

  it('accept durations within range', () => {
    const c = loadConfig({
      SPILLWAY_JOB_LOCK: '30s',
      SPILLWAY_JOB_STALLED_INTERVAL: '750ms',
      SPILLWAY_KAFKA_SESSION_TIMEOUT: '1m',
    });
    expect(c).toMatchObject({ jobLockMs: 30_000, jobStalledIntervalMs: 750, kafkaSessionTimeoutMs: 60_000 });
  });

  it.each([
    ['SPILLWAY_JOB_LOCK', '500ms', /SPILLWAY_JOB_LOCK must be between 1s and 600s/],
    ['SPILLWAY_JOB_LOCK', 'soon', /SPILLWAY_JOB_LOCK must be a duration/],
    ['SPILLWAY_JOB_STALLED_INTERVAL', '11m', /SPILLWAY_JOB_STALLED_INTERVAL must be between 0.5s and 600s/],
    ['SPILLWAY_KAFKA_SESSION_TIMEOUT', '2s', /SPILLWAY_KAFKA_SESSION_TIMEOUT must be between 6s and 1800s/],
  ])('%s=%s fails with one line naming the variable', (name, value, msg) => {
    expect(() => loadConfig({ [name]: value })).toThrow(msg);
  });
});

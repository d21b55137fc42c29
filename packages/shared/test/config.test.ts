import { describe, expect, it } from 'vitest';
import { createKeys, loadConfig, requireAdminToken } from '../src/index.ts';

describe('loadConfig', () => {
  it('applies the contract defaults', () => {
    const c = loadConfig({});
    expect(c.redis).toMatchObject({ kind: 'standalone', url: 'redis://127.0.0.1:6379' });
    expect(c.kafkaBrokers).toEqual(['127.0.0.1:9092']);
    expect(c.ingestPort).toBe(8080);
    expect(c.adminPort).toBe(8081);
    expect(c.ingestBackend).toBe('auto');
    expect(c.retryScheduleMs).toEqual([5e3, 3e5, 18e5, 72e5, 18e6, 36e6, 36e6]);
    expect(c.maxAttempts).toBe(8);
    expect(c.dedupWindowMs).toBe(86_400_000);
    expect(c.logLevel).toBe('info');
    expect(Object.isFrozen(c)).toBe(true);
  });

  it('parses cluster URLs, CIDR lists and durations', () => {
    const c = loadConfig({
      SPILLWAY_REDIS_URL: 'redis+cluster://10.0.0.1:7000,10.0.0.2:7001',
      SPILLWAY_TARGET_ALLOW_CIDRS: '127.0.0.1/32, ::1/128',
      SPILLWAY_RETRY_SCHEDULE: '100ms,1.5s,2m',
      SPILLWAY_DEDUP_WINDOW: '90m',
    });
    expect(c.redis.kind).toBe('cluster');
    expect(c.redis.nodes).toEqual([
      { host: '10.0.0.1', port: 7000 },
      { host: '10.0.0.2', port: 7001 },
    ]);
    expect(c.targetAllowCidrs).toEqual(['127.0.0.1/32', '::1/128']);
    expect(c.retryScheduleMs).toEqual([100, 1500, 120_000]);
    expect(c.dedupWindowMs).toBe(5_400_000);
  });

  it.each([
    ['SPILLWAY_REDIS_URL', 'nope'],
    ['SPILLWAY_KAFKA_BROKERS', 'broker-without-port'],
    ['SPILLWAY_INGEST_PORT', '70000'],
    ['SPILLWAY_ADMIN_PORT', 'abc'],
    ['SPILLWAY_INGEST_BACKEND', 'epoll'],
    ['SPILLWAY_RETRY_SCHEDULE', '5s,,5m'],
    ['SPILLWAY_TARGET_ALLOW_CIDRS', '10.0.0.0/33'],
    ['SPILLWAY_DEDUP_WINDOW', '24 hours'],
    ['SPILLWAY_LOG_LEVEL', 'loud'],
  ])('a bad %s fails with one line naming it', (name, value) => {
    let message = '';
    try {
      loadConfig({ [name]: value });
    } catch (err) {
      message = (err as Error).message;
      expect((err as { code?: string }).code).toBe('SPW_ERR_CONFIG');
    }
    expect(message).toContain(name);
    expect(message).not.toContain('\n');
  });

  it('requires an admin token for start', () => {
    expect(() => requireAdminToken(loadConfig({}))).toThrow(/SPILLWAY_ADMIN_TOKEN/);
    expect(requireAdminToken(loadConfig({ SPILLWAY_ADMIN_TOKEN: 'x'.repeat(32) }))).toHaveLength(32);
  });
});

describe('keys', () => {
  it('hash-tags every per-tenant key and the BullMQ prefix', () => {
    const k = createKeys('spw');
    for (const key of [
      k.tenant('acme'),
      k.endpoints('acme'),
      k.dedup('acme', 'e1'),
      k.event('acme', 'e1'),
      k.dlq('acme'),
      k.rate('acme', 'ep1'),
    ]) {
      expect(key).toContain('{t:acme}');
    }
    expect(k.bullPrefix).toBe('{spw}');
  });
});

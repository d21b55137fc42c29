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
    ['SPILLWAY_RECORD_RETENTION', '7 days'],
    ['SPILLWAY_RECORD_RETENTION', '168h,0'],
    ['SPILLWAY_HISTORY_TOPIC', 'bad topic'],
    ['SPILLWAY_HISTORY_PARTITIONS', '0'],
    ['SPILLWAY_DLQ_CAP', '-1'],
    ['SPILLWAY_DLQ_TTL', 'forever'],
    ['SPILLWAY_DLQ_ALERT', 'x'],
    ['SPILLWAY_ENDPOINT_DISABLE_AFTER', '5 days'],
    ['SPILLWAY_BREAKER_RESET', '100ms'],
    ['SPILLWAY_NOTIFY_URL', 'ftp://ops.example'],
    ['SPILLWAY_NOTIFY_SECRET', 'plain'],
    ['SPILLWAY_TENANT_EVENTS_PER_DAY', '-5'],
    ['SPILLWAY_TENANT_EVENT_RATE', '10/s'],
    ['SPILLWAY_EDGE', 'yes'],
    ['SPILLWAY_EDGE_MODE', 'drop'],
    ['SPILLWAY_EDGE_DEVICES', 'eth0,not an interface'],
    ['SPILLWAY_EDGE_RANGES', 'ftp://example.com/ranges'],
    ['SPILLWAY_EDGE_RANGES_INTERVAL', '10ms'],
    // A certificate without its key: the message names the one missing.
    ['SPILLWAY_TLS_KEY', undefined],
  ])('a bad %s fails with one line naming it', (name, value) => {
    const env: Record<string, string> =
      value === undefined ? { SPILLWAY_TLS_CERT: '/etc/spillway/cert.pem' } : { [name]: value };
    let message = '';
    try {
      loadConfig(env);
    } catch (err) {
      message = (err as Error).message;
      expect((err as { code?: string }).code).toBe('SPW_ERR_CONFIG');
    }
    expect(message).toContain(name);
    expect(message).not.toContain('\n');
  });

  it('reads TLS paths and the edge settings', () => {
    expect(loadConfig({}).tls).toBeUndefined();
    expect(loadConfig({}).edge).toEqual({
      enabled: false,
      devices: [],
      mode: 'monitor',
      ranges: [],
      rangesIntervalMs: 3_600_000,
    });
    const c = loadConfig({
      SPILLWAY_TLS_CERT: '/tls/cert.pem',
      SPILLWAY_TLS_KEY: '/tls/key.pem',
      SPILLWAY_EDGE: 'on',
      SPILLWAY_EDGE_DEVICES: 'eth0, ens5',
      SPILLWAY_EDGE_MODE: 'enforce',
      SPILLWAY_EDGE_RANGES: 'https://api.github.com/meta,/etc/spillway/stripe.txt',
      SPILLWAY_EDGE_RANGES_INTERVAL: '15m',
    });
    expect(c.tls).toEqual({ certPath: '/tls/cert.pem', keyPath: '/tls/key.pem' });
    expect(c.edge).toEqual({
      enabled: true,
      devices: ['eth0', 'ens5'],
      mode: 'enforce',
      ranges: ['https://api.github.com/meta', '/etc/spillway/stripe.txt'],
      rangesIntervalMs: 900_000,
    });
  });

  it('history and health defaults; SPILLWAY_NOTIFY_URL needs its secret', () => {
    const c = loadConfig({});
    expect(c.recordRetention).toEqual({ ms: 168 * 3_600_000, count: 100_000 });
    expect(c.endpointDisableAfterMs).toBe(120 * 3_600_000);
    expect(c.notify).toBeUndefined();
    expect(loadConfig({ SPILLWAY_ENDPOINT_DISABLE_AFTER: 'off' }).endpointDisableAfterMs).toBeUndefined();
    expect(loadConfig({}).breakerResetMs).toBe(30_000);
    expect(loadConfig({ SPILLWAY_BREAKER_RESET: '2s' }).breakerResetMs).toBe(2000);
    expect(loadConfig({ SPILLWAY_RECORD_RETENTION: '24h,500' }).recordRetention).toEqual({
      ms: 86_400_000,
      count: 500,
    });
    expect(() => loadConfig({ SPILLWAY_NOTIFY_URL: 'https://ops.example/hook' })).toThrow(
      /SPILLWAY_NOTIFY_SECRET/,
    );
  });

  it('events API quota and rate: defaults, overrides and off', () => {
    const d = loadConfig({});
    expect(d.tenantEventsPerDay).toBe(10_000_000);
    expect(d.tenantEventRate).toEqual({ perSecond: 1000, burst: 2000 });
    const c = loadConfig({ SPILLWAY_TENANT_EVENTS_PER_DAY: '500', SPILLWAY_TENANT_EVENT_RATE: '2.5' });
    expect(c.tenantEventsPerDay).toBe(500);
    expect(c.tenantEventRate).toEqual({ perSecond: 2.5, burst: 3 });
    const off = loadConfig({ SPILLWAY_TENANT_EVENTS_PER_DAY: 'off', SPILLWAY_TENANT_EVENT_RATE: 'off' });
    expect(off.tenantEventsPerDay).toBeUndefined();
    expect(off.tenantEventRate).toBeUndefined();
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
      k.dedupBase('acme'),
      k.eventIdIndex('acme'),
      k.historyMinutes('acme', 'events'),
      k.failedAttempts('acme', 'ep1'),
      k.failedEvents('acme'),
      k.dlq('acme'),
      k.rate('acme', 'ep1'),
    ]) {
      expect(key).toContain('{t:acme}');
    }
    expect(k.bullPrefix).toBe('{spw}');
  });
});

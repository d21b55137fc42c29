import ipaddr from 'ipaddr.js';
import { z } from 'zod';
import { parseDuration } from './duration.ts';
import { errors } from './errors.ts';
import { createPlainBox, createSecretBox, parseSecretKey, type SecretBox } from './secret-box.ts';
import type { Rate } from './types.ts';
import { whsecProblem } from './whsec.ts';

/**
 * Every environment variable Spillway reads, with its default, in one object. docs/operations.md
 * documents each; docs/contract-changes.md marks those the contract did not name.
 */
export const DEFAULTS = {
  SPILLWAY_REDIS_URL: 'redis://127.0.0.1:6379',
  SPILLWAY_KAFKA_BROKERS: '127.0.0.1:9092',
  SPILLWAY_INGEST_PORT: '8080',
  SPILLWAY_ADMIN_PORT: '8081',
  SPILLWAY_HOST: '0.0.0.0',
  /**
   * Address the admin port (admin API, /metrics, /healthz, /readyz) listens on. Loopback by default:
   * the ingest port faces the internet, the admin port should not unless the operator says so
   * (containers set 0.0.0.0 and put the port behind their network policy).
   */
  SPILLWAY_ADMIN_HOST: '127.0.0.1',
  SPILLWAY_INGEST_BACKEND: 'auto',
  /**
   * Ingest processes `spillway start` runs on the ingest port (`--role ingest` or `all`), each with
   * its own SO_REUSEPORT socket, under one supervisor (docs/edge.md, "Ingest workers"). 1 to 16:
   * the steering program's socket array holds 16.
   */
  SPILLWAY_INGEST_WORKERS: '1',
  SPILLWAY_RETRY_SCHEDULE: '5s,5m,30m,2h,5h,10h,10h',
  SPILLWAY_TARGET_ALLOW_CIDRS: '',
  SPILLWAY_DEDUP_WINDOW: '24h',
  SPILLWAY_LOG_LEVEL: 'info',
  /** Namespace of every Redis key, BullMQ queue and Kafka consumer group (tests use a random one). */
  SPILLWAY_PREFIX: 'spw',
  SPILLWAY_SPILL_TOPIC: 'spillway.spill',
  SPILLWAY_SPILL_PARTITIONS: '12',
  /**
   * Replicas of each spill-topic partition; its min.insync.replicas is one less (at least 1).
   * Empty: min(3, brokers in the cluster).
   */
  SPILLWAY_SPILL_REPLICATION: '',
  /** Bytes of request bodies the ingest role holds at once; past it new requests get 503. */
  SPILLWAY_INGEST_BODY_BUDGET: '67108864',
  /** Bytes of event bodies a worker holds in memory (admitted tasks); past it tasks spill to Kafka. */
  SPILLWAY_WORKER_BODY_BUDGET: '268435456',
  /** How long to collect accepted events before making them durable in one round trip. */
  SPILLWAY_GROUP_COMMIT: '2ms',
  /**
   * Replicas that must confirm a group commit (Redis WAIT) before its events are answered 202;
   * fewer within SPILLWAY_REDIS_WAIT_TIMEOUT → 503 (the provider retries; dedup makes that safe).
   * Empty: 1 on a Redis Cluster (its replication is asynchronous), 0 on a standalone Redis.
   */
  SPILLWAY_REDIS_WAIT_REPLICAS: '',
  SPILLWAY_REDIS_WAIT_TIMEOUT: '100ms',
  /**
   * Lock of an active intake/retry job (BullMQ lockDuration, renewed every half of it). After a
   * kill -9 the job moves to another worker within lock + stalled interval.
   */
  SPILLWAY_JOB_LOCK: '10s',
  /** How often workers look for jobs whose lock expired (BullMQ stalledInterval). */
  SPILLWAY_JOB_STALLED_INTERVAL: '5s',
  /** Spill drainer's Kafka consumer-group session timeout: how soon a dead worker's partitions move. */
  SPILLWAY_KAFKA_SESSION_TIMEOUT: '10s',
  /** Where the operator CLI finds the admin API. */
  SPILLWAY_ADMIN_URL: 'http://127.0.0.1:8081',
  /** `0` turns off the V8/malloc memory tuning `bin/spillway.mjs` applies to worker roles. */
  SPILLWAY_NODE_TUNING: '1',
  /**
   * How long the event log and the attempt history are kept (Kafka time retention and the TTL of
   * their Redis indexes), and how many entries each capped index (failed attempts per endpoint,
   * failed events per tenant) holds at most: `<duration>[,<count>]`.
   */
  SPILLWAY_RECORD_RETENTION: '168h,100000',
  /** Kafka topics of the history: `<this>.events`, `<this>.attempts`, `<this>.dlq` (the DLQ archive). */
  SPILLWAY_HISTORY_TOPIC: 'spillway.history',
  /** Partitions when Spillway creates the history topics. */
  SPILLWAY_HISTORY_PARTITIONS: '12',
  /** Dead letters a tenant keeps in Redis (with bodies); older ones move to the Kafka DLQ archive. */
  SPILLWAY_DLQ_CAP: '10000',
  /** How long a dead letter stays in Redis before it moves to the archive. */
  SPILLWAY_DLQ_TTL: '168h',
  /** Operators are notified (SPILLWAY_NOTIFY_URL) when a tenant's DLQ reaches this many entries. */
  SPILLWAY_DLQ_ALERT: '1000',
  /**
   * An endpoint whose every attempt failed for this long is disabled (`disabledReason: failing`),
   * as after a 410; `off` never disables for failures.
   */
  SPILLWAY_ENDPOINT_DISABLE_AFTER: '120h',
  /** How long an endpoint's open circuit breaker waits before one half-open probe. */
  SPILLWAY_BREAKER_RESET: '30s',
  /** Operator notifications (endpoint disabled, DLQ over SPILLWAY_DLQ_ALERT, tenant over quota): a webhook URL. */
  SPILLWAY_NOTIFY_URL: '',
  /** The `whsec_` secret operator notifications are signed with (Standard Webhooks, as deliveries). */
  SPILLWAY_NOTIFY_SECRET: '',
  /**
   * Keys of earlier SPILLWAY_SECRET_KEYs (comma-separated, same format) that still open stored
   * secrets during a key rotation; nothing is sealed under them. SPILLWAY_SECRET_KEY itself has no
   * default (unset, `spillway start` stores secrets unencrypted and logs one warning: secretBoxOf).
   */
  SPILLWAY_SECRET_KEY_PREVIOUS: '',
  /** Events a tenant may post through the events API per UTC day, unless its limits say otherwise; `off`: no quota. */
  SPILLWAY_TENANT_EVENTS_PER_DAY: '10000000',
  /** Events API rate per tenant, `<perSecond>:<burst>`, unless its limits say otherwise; `off`: none. */
  SPILLWAY_TENANT_EVENT_RATE: '1000:2000',
  /**
   * PEM certificate chain and private key (paths) for TLS on the ingest port; both or neither.
   * Re-read on SIGHUP (docs/ingest.md, "One port").
   */
  SPILLWAY_TLS_CERT: '',
  SPILLWAY_TLS_KEY: '',
  /** `on`: `spillway start` attaches the kernel edge (docs/edge.md) when it has the capabilities. */
  SPILLWAY_EDGE: 'off',
  /** Interfaces the XDP allowlist attaches to (comma-separated); empty: the drop tracer only. */
  SPILLWAY_EDGE_DEVICES: '',
  /** XDP verdict mode set when the edge attaches: monitor (count only) or enforce. */
  SPILLWAY_EDGE_MODE: 'monitor',
  /**
   * Provider ranges the allowlist refresher loads, comma-separated: http(s) URLs (GitHub's
   * `/meta`, Stripe's webhook IP list) or file paths; plus every source's allowCidrs.
   */
  SPILLWAY_EDGE_RANGES: '',
  /** How often the refresher reloads the ranges. */
  SPILLWAY_EDGE_RANGES_INTERVAL: '1h',
} as const;

/** Reports a bad value (one line naming the variable) from inside a zod transform. */
function invalid(ctx: z.RefinementCtx, message: string): never {
  ctx.addIssue({ code: 'custom', message });
  return z.NEVER;
}

/** A comma-separated list, items trimmed, empty ones dropped. */
const csv = (s: string) =>
  s
    .split(',')
    .map((item) => item.trim())
    .filter(Boolean);

const port = (name: string) =>
  z
    .string()
    .regex(/^\d+$/, `${name} must be a port number 0-65535`)
    .transform(Number)
    .refine((n) => n >= 0 && n <= 65535, `${name} must be a port number 0-65535`);

const positiveInt = (name: string) =>
  z
    .string()
    .regex(/^[1-9]\d*$/, `${name} must be a positive integer`)
    .transform(Number);

const duration = (name: string) =>
  z.string().transform((s, ctx) => {
    const ms = parseDuration(s);
    if (ms === undefined || ms <= 0) {
      return invalid(ctx, `${name} must be a duration like 250ms, 5s, 30m or 2h (got "${s}")`);
    }
    return ms;
  });

/** A 32-byte key (hex or base64); the message names the variable, never the value. */
const KEY_FORMAT = '32 random bytes as 64 hex characters or base64 (openssl rand -base64 32)';

/** A duration within [minMs, maxMs]; the message names the variable and the bounds. */
const durationWithin = (name: string, minMs: number, maxMs: number, why: string) =>
  duration(name).refine(
    (ms) => ms >= minMs && ms <= maxMs,
    `${name} must be between ${minMs / 1000}s and ${maxMs / 1000}s (${why})`,
  );

export interface RedisTarget {
  kind: 'standalone' | 'cluster';
  /** For standalone: the URL as given; for cluster: the seed nodes. */
  url: string;
  nodes: { host: string; port: number }[];
}

/**
 * A malformed URL may still carry a password: everything before the last `@` (after the scheme's
 * `//`, if any) is userinfo and is never echoed.
 */
export function redactUserinfo(s: string): string {
  const at = s.lastIndexOf('@');
  if (at < 0) return s;
  const scheme = /^[^/@]*\/\//.exec(s)?.[0] ?? '';
  return `${scheme}***${s.slice(at)}`;
}

const schema = z.object({
  SPILLWAY_REDIS_URL: z.string().transform((s, ctx): RedisTarget => {
    const cluster = /^redis\+cluster:\/\/(.+)$/.exec(s);
    if (cluster) {
      const nodes = cluster[1]!.split(',').map((hp) => {
        const [host, p] = hp.trim().split(':');
        return { host: host ?? '', port: Number(p ?? 6379) };
      });
      if (nodes.every((n) => n.host && Number.isInteger(n.port) && n.port > 0))
        return { kind: 'cluster', url: s, nodes };
    } else if (/^rediss?:\/\/[^/\s]+/.test(s) && URL.canParse(s)) {
      const u = new URL(s);
      return { kind: 'standalone', url: s, nodes: [{ host: u.hostname, port: Number(u.port || 6379) }] };
    }
    return invalid(
      ctx,
      `SPILLWAY_REDIS_URL must be redis://host:port, rediss://... or redis+cluster://host:port,... (got "${redactUserinfo(s)}")`,
    );
  }),
  SPILLWAY_KAFKA_BROKERS: z.string().transform((s, ctx) => {
    const list = csv(s);
    if (
      list.length > 0 &&
      list.every((b) => /^[\w.-]+:\d{1,5}$/.test(b) || /^\[[0-9a-f:]+\]:\d{1,5}$/i.test(b))
    )
      return list;
    return invalid(ctx, `SPILLWAY_KAFKA_BROKERS must be host:port[,host:port...] (got "${s}")`);
  }),
  SPILLWAY_INGEST_PORT: port('SPILLWAY_INGEST_PORT'),
  SPILLWAY_ADMIN_PORT: port('SPILLWAY_ADMIN_PORT'),
  SPILLWAY_HOST: z.string().min(1, 'SPILLWAY_HOST must be an address to listen on'),
  SPILLWAY_ADMIN_HOST: z.string().min(1, 'SPILLWAY_ADMIN_HOST must be an address to listen on'),
  SPILLWAY_ADMIN_TOKEN: z.string().optional(),
  SPILLWAY_METRICS_TOKEN: z
    .string()
    .min(16, 'SPILLWAY_METRICS_TOKEN must be at least 16 characters (or unset: /metrics without a token)')
    .optional(),
  SPILLWAY_INGEST_BACKEND: z.enum(['uring', 'node', 'auto'], {
    error: (i) => `SPILLWAY_INGEST_BACKEND must be uring, node or auto (got "${String(i.input)}")`,
  }),
  SPILLWAY_RETRY_SCHEDULE: z.string().transform((s, ctx) => {
    const parts = s.split(',').map((p) => parseDuration(p));
    if (parts.length > 0 && parts.every((ms) => ms !== undefined && ms > 0)) return parts as number[];
    return invalid(
      ctx,
      `SPILLWAY_RETRY_SCHEDULE must be a comma-separated list of durations like 5s,5m,30m (got "${s}")`,
    );
  }),
  SPILLWAY_TARGET_ALLOW_CIDRS: z.string().transform((s, ctx) => {
    const list = csv(s);
    for (const c of list) {
      try {
        ipaddr.parseCIDR(c);
      } catch {
        return invalid(
          ctx,
          `SPILLWAY_TARGET_ALLOW_CIDRS has an invalid CIDR "${c}" (e.g. 127.0.0.1/32,::1/128)`,
        );
      }
    }
    return list;
  }),
  SPILLWAY_DEDUP_WINDOW: duration('SPILLWAY_DEDUP_WINDOW'),
  SPILLWAY_LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'], {
    error: (i) =>
      `SPILLWAY_LOG_LEVEL must be one of fatal, error, warn, info, debug, trace, silent (got "${String(i.input)}")`,
  }),
  SPILLWAY_PREFIX: z
    .string()
    .regex(/^[a-z0-9][a-z0-9_-]{0,31}$/, 'SPILLWAY_PREFIX must be 1-32 chars of a-z, 0-9, _ or -'),
  SPILLWAY_SPILL_TOPIC: z
    .string()
    .regex(/^[a-zA-Z0-9._-]{1,200}$/, 'SPILLWAY_SPILL_TOPIC must be a valid Kafka topic name'),
  SPILLWAY_SPILL_PARTITIONS: positiveInt('SPILLWAY_SPILL_PARTITIONS'),
  SPILLWAY_SPILL_REPLICATION: z
    .string()
    .regex(
      /^([1-9][0-9]?)?$/,
      'SPILLWAY_SPILL_REPLICATION must be empty (min(3, brokers)) or a whole number 1-99',
    )
    .transform((v) => (v === '' ? undefined : Number(v))),
  SPILLWAY_INGEST_BODY_BUDGET: positiveInt('SPILLWAY_INGEST_BODY_BUDGET'),
  SPILLWAY_INGEST_WORKERS: z
    .string()
    .regex(/^[1-9]\d*$/, 'SPILLWAY_INGEST_WORKERS must be a whole number from 1 to 16')
    .transform(Number)
    .refine(
      (n) => n <= 16,
      'SPILLWAY_INGEST_WORKERS must be a whole number from 1 to 16 (the steering program holds 16 sockets)',
    ),
  SPILLWAY_WORKER_BODY_BUDGET: positiveInt('SPILLWAY_WORKER_BODY_BUDGET'),
  SPILLWAY_GROUP_COMMIT: duration('SPILLWAY_GROUP_COMMIT'),
  SPILLWAY_REDIS_WAIT_REPLICAS: z
    .string()
    .regex(/^([0-9])?$/, 'SPILLWAY_REDIS_WAIT_REPLICAS must be empty (1 on a cluster, else 0) or 0-9')
    .transform((v) => (v === '' ? undefined : Number(v))),
  SPILLWAY_REDIS_WAIT_TIMEOUT: duration('SPILLWAY_REDIS_WAIT_TIMEOUT'),
  SPILLWAY_JOB_LOCK: durationWithin(
    'SPILLWAY_JOB_LOCK',
    1000,
    600_000,
    'shorter locks expire under event-loop pauses and cause duplicate processing',
  ),
  SPILLWAY_JOB_STALLED_INTERVAL: durationWithin(
    'SPILLWAY_JOB_STALLED_INTERVAL',
    500,
    600_000,
    'every worker scans Redis for stalled jobs this often',
  ),
  SPILLWAY_KAFKA_SESSION_TIMEOUT: durationWithin(
    'SPILLWAY_KAFKA_SESSION_TIMEOUT',
    6000,
    1_800_000,
    "Kafka brokers' default group.min/max.session.timeout.ms",
  ),
  SPILLWAY_ADMIN_URL: z.string().transform((s, ctx) => {
    if (/^https?:\/\/[^/\s]+/.test(s) && URL.canParse(s)) return s.replace(/\/+$/, '');
    return invalid(ctx, `SPILLWAY_ADMIN_URL must be an http:// or https:// URL (got "${s}")`);
  }),
  SPILLWAY_NODE_TUNING: z.enum(['0', '1'], {
    error: (i) => `SPILLWAY_NODE_TUNING must be 0 or 1 (got "${String(i.input)}")`,
  }),
  SPILLWAY_RECORD_RETENTION: z.string().transform((s, ctx) => {
    const [d = '', c] = s.split(',').map((x) => x.trim());
    const ms = parseDuration(d);
    const count = c === undefined ? 100_000 : /^[1-9]\d{0,8}$/.test(c) ? Number(c) : Number.NaN;
    if (ms === undefined || ms < 60_000 || ms > 90 * 24 * 3_600_000 || !Number.isFinite(count))
      return invalid(
        ctx,
        `SPILLWAY_RECORD_RETENTION must be <duration>[,<count>], duration 1m-2160h, e.g. 168h,100000 (got "${s}")`,
      );
    return { ms, count };
  }),
  SPILLWAY_HISTORY_TOPIC: z
    .string()
    .regex(/^[a-zA-Z0-9._-]{1,180}$/, 'SPILLWAY_HISTORY_TOPIC must be a valid Kafka topic name prefix'),
  SPILLWAY_HISTORY_PARTITIONS: positiveInt('SPILLWAY_HISTORY_PARTITIONS'),
  SPILLWAY_DLQ_CAP: positiveInt('SPILLWAY_DLQ_CAP'),
  SPILLWAY_DLQ_TTL: duration('SPILLWAY_DLQ_TTL'),
  SPILLWAY_DLQ_ALERT: positiveInt('SPILLWAY_DLQ_ALERT'),
  SPILLWAY_BREAKER_RESET: durationWithin(
    'SPILLWAY_BREAKER_RESET',
    1000,
    3_600_000,
    'an open breaker waits this long before its half-open probe',
  ),
  SPILLWAY_ENDPOINT_DISABLE_AFTER: z.string().transform((s, ctx) => {
    if (s === 'off') return undefined;
    const ms = parseDuration(s);
    if (ms === undefined || ms < 1000)
      return invalid(
        ctx,
        `SPILLWAY_ENDPOINT_DISABLE_AFTER must be a duration like 120h (at least 1s), or off (got "${s}")`,
      );
    return ms;
  }),
  SPILLWAY_NOTIFY_URL: z.string().transform((s, ctx) => {
    if (s === '') return undefined;
    if (/^https?:\/\/[^/\s]+/.test(s) && URL.canParse(s)) return s;
    return invalid(
      ctx,
      `SPILLWAY_NOTIFY_URL must be an http:// or https:// URL (got "${redactUserinfo(s)}")`,
    );
  }),
  SPILLWAY_NOTIFY_SECRET: z.string().transform((s, ctx) => {
    if (s === '') return undefined;
    const problem = whsecProblem(s, 'SPILLWAY_NOTIFY_SECRET');
    if (problem) return invalid(ctx, problem);
    return s;
  }),
  SPILLWAY_SECRET_KEY: z
    .string()
    .optional()
    .transform((s, ctx) => {
      if (s === undefined) return undefined;
      return parseSecretKey(s) ?? invalid(ctx, `SPILLWAY_SECRET_KEY must be ${KEY_FORMAT}`);
    }),
  SPILLWAY_SECRET_KEY_PREVIOUS: z
    .string()
    .transform((s, ctx) =>
      csv(s).map(
        (item, i) =>
          parseSecretKey(item) ??
          invalid(ctx, `SPILLWAY_SECRET_KEY_PREVIOUS: key ${i + 1} of the list must be ${KEY_FORMAT}`),
      ),
    ),
  SPILLWAY_TENANT_EVENTS_PER_DAY: z.string().transform((s, ctx) => {
    if (s === 'off') return undefined;
    if (/^[1-9]\d{0,11}$/.test(s)) return Number(s);
    return invalid(ctx, `SPILLWAY_TENANT_EVENTS_PER_DAY must be a positive whole number or off (got "${s}")`);
  }),
  SPILLWAY_TENANT_EVENT_RATE: z.string().transform((s, ctx): Rate | undefined => {
    if (s === 'off') return undefined;
    const m = /^(\d+(?:\.\d+)?)(?::([1-9]\d*))?$/.exec(s);
    const perSecond = Number(m?.[1]);
    if (m && perSecond > 0 && perSecond <= 1_000_000)
      return { perSecond, burst: m[2] ? Number(m[2]) : Math.max(1, Math.ceil(perSecond)) };
    return invalid(
      ctx,
      `SPILLWAY_TENANT_EVENT_RATE must be <perSecond>[:<burst>] like 1000:2000, or off (got "${s}")`,
    );
  }),
  SPILLWAY_TLS_CERT: z.string(),
  SPILLWAY_TLS_KEY: z.string(),
  SPILLWAY_EDGE: z.enum(['on', 'off'], {
    error: (i) => `SPILLWAY_EDGE must be on or off (got "${String(i.input)}")`,
  }),
  SPILLWAY_EDGE_DEVICES: z.string().transform((s, ctx) => {
    const list = csv(s);
    const bad = list.find((d) => !/^[A-Za-z0-9_.:@-]{1,15}$/.test(d));
    if (bad !== undefined)
      return invalid(ctx, `SPILLWAY_EDGE_DEVICES has an invalid interface name "${bad}" (e.g. eth0,ens5)`);
    return list;
  }),
  SPILLWAY_EDGE_MODE: z.enum(['monitor', 'enforce', 'off'], {
    error: (i) => `SPILLWAY_EDGE_MODE must be monitor, enforce or off (got "${String(i.input)}")`,
  }),
  SPILLWAY_EDGE_RANGES: z.string().transform((s, ctx) => {
    const list = csv(s);
    for (const r of list) {
      if (/^[a-z][a-z0-9+.-]*:\/\//i.test(r) && !(/^https?:\/\//.test(r) && URL.canParse(r)))
        return invalid(ctx, `SPILLWAY_EDGE_RANGES: "${r}" is neither an http(s) URL nor a file path`);
    }
    return list;
  }),
  SPILLWAY_EDGE_RANGES_INTERVAL: durationWithin(
    'SPILLWAY_EDGE_RANGES_INTERVAL',
    1000,
    7 * 24 * 3_600_000,
    'providers publish range changes days ahead; a fetch per second at most',
  ),
});

/** The server's variables (`spillway start`); the CLI's and bin's are read by their own loaders. */
const serverSchema = schema
  .omit({ SPILLWAY_ADMIN_URL: true, SPILLWAY_NODE_TUNING: true })
  .superRefine((c, ctx) => {
    // Workers that each bind port 0 would each get a port of their own, not one shared group.
    if (c.SPILLWAY_INGEST_WORKERS > 1 && c.SPILLWAY_INGEST_PORT === 0)
      ctx.addIssue({
        code: 'custom',
        path: ['SPILLWAY_INGEST_WORKERS'],
        message:
          'SPILLWAY_INGEST_WORKERS above 1 needs a fixed SPILLWAY_INGEST_PORT (workers share it; 0 would give each its own)',
      });
    // A certificate without its key (or the reverse) cannot serve TLS: say which one is missing.
    if ((c.SPILLWAY_TLS_CERT === '') !== (c.SPILLWAY_TLS_KEY === '')) {
      const missing = c.SPILLWAY_TLS_CERT === '' ? 'SPILLWAY_TLS_CERT' : 'SPILLWAY_TLS_KEY';
      const given = missing === 'SPILLWAY_TLS_CERT' ? 'SPILLWAY_TLS_KEY' : 'SPILLWAY_TLS_CERT';
      ctx.addIssue({
        code: 'custom',
        path: [missing],
        message: `${missing} must be set when ${given} is (PEM file paths for TLS on the ingest port; set both or neither)`,
      });
    }
  });
const cliSchema = schema.pick({ SPILLWAY_ADMIN_URL: true, SPILLWAY_ADMIN_TOKEN: true });
const tuningSchema = schema.pick({ SPILLWAY_NODE_TUNING: true });
const edgeToolSchema = schema.pick({ SPILLWAY_INGEST_PORT: true });

/** Fills defaults, validates with `s` and throws one line naming the first bad variable. */
function parseEnv<S extends z.ZodType>(env: NodeJS.ProcessEnv, s: S): z.output<S> {
  const raw: Record<string, string | undefined> = {};
  for (const [k, v] of Object.entries(DEFAULTS)) raw[k] = env[k] === undefined || env[k] === '' ? v : env[k];
  raw.SPILLWAY_ADMIN_TOKEN = env.SPILLWAY_ADMIN_TOKEN || undefined;
  raw.SPILLWAY_METRICS_TOKEN = env.SPILLWAY_METRICS_TOKEN || undefined;
  raw.SPILLWAY_SECRET_KEY = env.SPILLWAY_SECRET_KEY || undefined;
  const parsed = s.safeParse(raw);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const variable = String(issue.path[0] ?? '');
    const msg = issue.message.startsWith(variable) ? issue.message : `${variable}: ${issue.message}`;
    throw errors.config(msg);
  }
  return parsed.data;
}

/** The validated, frozen configuration. Durations are milliseconds. */
export interface Config {
  redis: RedisTarget;
  kafkaBrokers: string[];
  ingestPort: number;
  adminPort: number;
  /** Listen address of the ingest port. */
  host: string;
  /** Listen address of the admin port (default loopback). */
  adminHost: string;
  adminToken: string | undefined;
  /** Bearer token /metrics requires when set. */
  metricsToken: string | undefined;
  ingestBackend: 'uring' | 'node' | 'auto';
  /** Ingest processes sharing the ingest port (SO_REUSEPORT); above 1 `start` supervises them. */
  ingestWorkers: number;
  retryScheduleMs: number[];
  /** Maximum delivery attempts: the schedule's length + 1. */
  maxAttempts: number;
  targetAllowCidrs: string[];
  dedupWindowMs: number;
  logLevel: 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';
  prefix: string;
  spillTopic: string;
  spillPartitions: number;
  /** Spill topic replication factor; undefined = min(3, brokers). */
  spillReplication: number | undefined;
  ingestBodyBudget: number;
  workerBodyBudget: number;
  groupCommitMs: number;
  /** Replicas a group commit waits for (WAIT) before it answers; 0 = none. */
  redisWaitReplicas: number;
  redisWaitTimeoutMs: number;
  /** BullMQ lockDuration of intake/retry jobs (ms). */
  jobLockMs: number;
  /** BullMQ stalledInterval (ms). */
  jobStalledIntervalMs: number;
  /** Spill drainer consumer-group session timeout (ms). */
  kafkaSessionTimeoutMs: number;
  /** SPILLWAY_RECORD_RETENTION: how long history is kept (ms) and the cap of each capped index. */
  recordRetention: { ms: number; count: number };
  /** SPILLWAY_HISTORY_TOPIC: prefix of the history topics. */
  historyTopic: string;
  historyPartitions: number;
  /** Dead letters per tenant in Redis; older ones are archived to `<historyTopic>.dlq`. */
  dlqCap: number;
  dlqTtlMs: number;
  /** SPILLWAY_DLQ_ALERT: DLQ length that notifies the operator. */
  dlqAlert: number;
  /** SPILLWAY_ENDPOINT_DISABLE_AFTER (ms); undefined = off. */
  endpointDisableAfterMs: number | undefined;
  /** SPILLWAY_BREAKER_RESET (ms): an open endpoint breaker's wait before its half-open probe. */
  breakerResetMs: number;
  /** SPILLWAY_NOTIFY_URL / SPILLWAY_NOTIFY_SECRET; the URL needs the secret. */
  notify: { url: string; secret: string } | undefined;
  /** SPILLWAY_SECRET_KEY, decoded (32 bytes); without it secrets are stored unencrypted (`secretBoxOf`). */
  secretKey: Buffer | undefined;
  /** SPILLWAY_SECRET_KEY_PREVIOUS, decoded: keys that still open stored secrets. */
  secretKeysPrevious: readonly Buffer[];
  /** Default events-API quota per tenant and UTC day; undefined: none. */
  tenantEventsPerDay: number | undefined;
  /** Default events-API rate per tenant; undefined: none. */
  tenantEventRate: Readonly<Rate> | undefined;
  /** TLS on the ingest port: PEM paths (read at start and on SIGHUP); undefined = no TLS. */
  tls: { certPath: string; keyPath: string } | undefined;
  /** The kernel edge: attach at start (`on`), where, in which mode, and the allowlist refresher. */
  edge: {
    enabled: boolean;
    devices: string[];
    mode: 'monitor' | 'enforce' | 'off';
    ranges: string[];
    rangesIntervalMs: number;
  };
}

/**
 * Reads the environment once. A bad value throws a SpillwayError (SPW_ERR_CONFIG) whose message is
 * one line naming the variable; `spillway start` prints it and exits 1.
 */
export function loadConfig(env: NodeJS.ProcessEnv = process.env): Readonly<Config> {
  const c = parseEnv(env, serverSchema);
  return Object.freeze({
    redis: Object.freeze(c.SPILLWAY_REDIS_URL),
    kafkaBrokers: Object.freeze(c.SPILLWAY_KAFKA_BROKERS) as string[],
    ingestPort: c.SPILLWAY_INGEST_PORT,
    adminPort: c.SPILLWAY_ADMIN_PORT,
    host: c.SPILLWAY_HOST,
    adminHost: c.SPILLWAY_ADMIN_HOST,
    adminToken: c.SPILLWAY_ADMIN_TOKEN,
    metricsToken: c.SPILLWAY_METRICS_TOKEN,
    ingestBackend: c.SPILLWAY_INGEST_BACKEND,
    ingestWorkers: c.SPILLWAY_INGEST_WORKERS,
    retryScheduleMs: Object.freeze(c.SPILLWAY_RETRY_SCHEDULE) as number[],
    maxAttempts: c.SPILLWAY_RETRY_SCHEDULE.length + 1,
    targetAllowCidrs: Object.freeze(c.SPILLWAY_TARGET_ALLOW_CIDRS) as string[],
    dedupWindowMs: c.SPILLWAY_DEDUP_WINDOW,
    logLevel: c.SPILLWAY_LOG_LEVEL,
    prefix: c.SPILLWAY_PREFIX,
    spillTopic: c.SPILLWAY_SPILL_TOPIC,
    spillPartitions: c.SPILLWAY_SPILL_PARTITIONS,
    spillReplication: c.SPILLWAY_SPILL_REPLICATION,
    ingestBodyBudget: c.SPILLWAY_INGEST_BODY_BUDGET,
    workerBodyBudget: c.SPILLWAY_WORKER_BODY_BUDGET,
    groupCommitMs: c.SPILLWAY_GROUP_COMMIT,
    redisWaitReplicas: c.SPILLWAY_REDIS_WAIT_REPLICAS ?? (c.SPILLWAY_REDIS_URL.kind === 'cluster' ? 1 : 0),
    redisWaitTimeoutMs: c.SPILLWAY_REDIS_WAIT_TIMEOUT,
    jobLockMs: c.SPILLWAY_JOB_LOCK,
    jobStalledIntervalMs: c.SPILLWAY_JOB_STALLED_INTERVAL,
    kafkaSessionTimeoutMs: c.SPILLWAY_KAFKA_SESSION_TIMEOUT,
    recordRetention: Object.freeze(c.SPILLWAY_RECORD_RETENTION),
    historyTopic: c.SPILLWAY_HISTORY_TOPIC,
    historyPartitions: c.SPILLWAY_HISTORY_PARTITIONS,
    dlqCap: c.SPILLWAY_DLQ_CAP,
    dlqTtlMs: c.SPILLWAY_DLQ_TTL,
    dlqAlert: c.SPILLWAY_DLQ_ALERT,
    endpointDisableAfterMs: c.SPILLWAY_ENDPOINT_DISABLE_AFTER,
    breakerResetMs: c.SPILLWAY_BREAKER_RESET,
    notify: notifyOf(c.SPILLWAY_NOTIFY_URL, c.SPILLWAY_NOTIFY_SECRET),
    secretKey: c.SPILLWAY_SECRET_KEY,
    secretKeysPrevious: Object.freeze(c.SPILLWAY_SECRET_KEY_PREVIOUS),
    tenantEventsPerDay: c.SPILLWAY_TENANT_EVENTS_PER_DAY,
    tenantEventRate: c.SPILLWAY_TENANT_EVENT_RATE && Object.freeze(c.SPILLWAY_TENANT_EVENT_RATE),
    tls:
      c.SPILLWAY_TLS_CERT === ''
        ? undefined
        : Object.freeze({ certPath: c.SPILLWAY_TLS_CERT, keyPath: c.SPILLWAY_TLS_KEY }),
    edge: Object.freeze({
      enabled: c.SPILLWAY_EDGE === 'on',
      devices: Object.freeze(c.SPILLWAY_EDGE_DEVICES) as string[],
      mode: c.SPILLWAY_EDGE_MODE,
      ranges: Object.freeze(c.SPILLWAY_EDGE_RANGES) as string[],
      rangesIntervalMs: c.SPILLWAY_EDGE_RANGES_INTERVAL,
    }),
  });
}

function notifyOf(url: string | undefined, secret: string | undefined): Config['notify'] {
  if (url === undefined) return undefined;
  if (secret === undefined)
    throw errors.config('SPILLWAY_NOTIFY_SECRET is required with SPILLWAY_NOTIFY_URL (whsec_ + base64)');
  return Object.freeze({ url, secret });
}

/** What the operator CLI reads: the admin API's URL and token (nothing else is validated). */
export interface CliConfig {
  adminUrl: string;
  adminToken: string | undefined;
}

export function loadCliConfig(env: NodeJS.ProcessEnv = process.env): Readonly<CliConfig> {
  const c = parseEnv(env, cliSchema);
  return Object.freeze({
    adminUrl: c.SPILLWAY_ADMIN_URL,
    adminToken: c.SPILLWAY_ADMIN_TOKEN,
  });
}

/**
 * What the kernel-edge helpers of @spillway/ingest (edge.ts: the loader runs of `spillway edge ...`
 * and of the ingest role) read: the loader's path override and the ingest port they judge by default.
 */
export interface EdgeToolConfig {
  /** SPILLWAY_EDGE_LOADER: the loader's path (tests point it elsewhere); unset: bpf/.build/spillway-edge. */
  readonly loader: string | undefined;
  /** SPILLWAY_INGEST_PORT, validated when first read (throws SPW_ERR_CONFIG naming it). */
  readonly ingestPort: number;
}

export function loadEdgeToolConfig(env: NodeJS.ProcessEnv = process.env): EdgeToolConfig {
  const loader = env.SPILLWAY_EDGE_LOADER || undefined;
  return Object.freeze({
    loader,
    // Lazy: a module that reads the loader path at import must not fail on an unrelated variable.
    get ingestPort() {
      return parseEnv(env, edgeToolSchema).SPILLWAY_INGEST_PORT;
    },
  });
}

/**
 * What `bin/spillway.mjs` reads before it re-executes a worker process with memory flags
 * (docs/operations.md, "Worker memory"): whether to tune, whether this process is the re-executed
 * one, and the flags/arena setting the operator already gave (those win).
 */
export interface NodeTuning {
  /** SPILLWAY_NODE_TUNING is on and this process is not the re-executed one yet. */
  reexec: boolean;
  /** NODE_OPTIONS as given: flags named there are not added again. */
  nodeOptions: string;
  /** The environment of the re-executed process: this one's, marked as tuned, MALLOC_ARENA_MAX 2 unless given. */
  execEnv: Record<string, string | undefined>;
}

export function loadNodeTuning(env: NodeJS.ProcessEnv = process.env): Readonly<NodeTuning> {
  const c = parseEnv(env, tuningSchema);
  return Object.freeze({
    reexec: c.SPILLWAY_NODE_TUNING === '1' && env.SPILLWAY_NODE_TUNED === undefined,
    nodeOptions: env.NODE_OPTIONS ?? '',
    execEnv: { ...env, SPILLWAY_NODE_TUNED: '1', MALLOC_ARENA_MAX: env.MALLOC_ARENA_MAX ?? '2' },
  });
}

/** `spillway start` needs an admin token; other commands (tests, the CLI) may not. */
export function requireAdminToken(config: Readonly<Config>): string {
  if (!config.adminToken)
    throw errors.config(
      'SPILLWAY_ADMIN_TOKEN is required for `spillway start` (set it to a long random string)',
    );
  if (config.adminToken.length < 16)
    throw errors.config('SPILLWAY_ADMIN_TOKEN must be at least 16 characters');
  return config.adminToken;
}

/**
 * The box for stored endpoint and source secrets: AES-256-GCM under SPILLWAY_SECRET_KEY when it is
 * set (the images, manifests and `infra/local/up.sh` set it); without it, secrets are stored as
 * they are and `encrypted` is false, so `spillway start` can say so in one warning line
 * (docs/contract-changes.md: the contract makes only SPILLWAY_ADMIN_TOKEN required).
 */
export function secretBoxOf(config: Readonly<Config>): { box: SecretBox; encrypted: boolean } {
  if (!config.secretKey) return { box: createPlainBox(config.secretKeysPrevious), encrypted: false };
  return { box: createSecretBox(config.secretKey, config.secretKeysPrevious), encrypted: true };
}

import ipaddr from 'ipaddr.js';
import { z } from 'zod';
import { parseDuration } from './duration.ts';
import { errors } from './errors.ts';

/**
 * Every environment variable Spillway reads, with its default, in one object. CONTRACT.md lists the
 * public ones; the rest are operator knobs documented in docs/operations.md.
 */
export const DEFAULTS = {
  SPILLWAY_REDIS_URL: 'redis://127.0.0.1:6379',
  SPILLWAY_KAFKA_BROKERS: '127.0.0.1:9092',
  SPILLWAY_INGEST_PORT: '8080',
  SPILLWAY_ADMIN_PORT: '8081',
  SPILLWAY_HOST: '0.0.0.0',
  SPILLWAY_INGEST_BACKEND: 'auto',
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
      `SPILLWAY_REDIS_URL must be redis://host:port, rediss://... or redis+cluster://host:port,... (got "${s}")`,
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
  SPILLWAY_ADMIN_TOKEN: z.string().optional(),
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
  SPILLWAY_WORKER_BODY_BUDGET: positiveInt('SPILLWAY_WORKER_BODY_BUDGET'),
  SPILLWAY_GROUP_COMMIT: duration('SPILLWAY_GROUP_COMMIT'),
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
});

/** The server's variables (`spillway start`); the CLI's and bin's are read by their own loaders. */
const serverSchema = schema.omit({ SPILLWAY_ADMIN_URL: true, SPILLWAY_NODE_TUNING: true });
const cliSchema = schema.pick({ SPILLWAY_ADMIN_URL: true, SPILLWAY_ADMIN_TOKEN: true });
const tuningSchema = schema.pick({ SPILLWAY_NODE_TUNING: true });

/** Fills defaults, validates with `s` and throws one line naming the first bad variable. */
function parseEnv<S extends z.ZodType>(env: NodeJS.ProcessEnv, s: S): z.output<S> {
  const raw: Record<string, string | undefined> = {};
  for (const [k, v] of Object.entries(DEFAULTS)) raw[k] = env[k] === undefined || env[k] === '' ? v : env[k];
  raw.SPILLWAY_ADMIN_TOKEN = env.SPILLWAY_ADMIN_TOKEN || undefined;
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
  host: string;
  adminToken: string | undefined;
  ingestBackend: 'uring' | 'node' | 'auto';
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
  /** BullMQ lockDuration of intake/retry jobs (ms). */
  jobLockMs: number;
  /** BullMQ stalledInterval (ms). */
  jobStalledIntervalMs: number;
  /** Spill drainer consumer-group session timeout (ms). */
  kafkaSessionTimeoutMs: number;
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
    adminToken: c.SPILLWAY_ADMIN_TOKEN,
    ingestBackend: c.SPILLWAY_INGEST_BACKEND,
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
    jobLockMs: c.SPILLWAY_JOB_LOCK,
    jobStalledIntervalMs: c.SPILLWAY_JOB_STALLED_INTERVAL,
    kafkaSessionTimeoutMs: c.SPILLWAY_KAFKA_SESSION_TIMEOUT,
  });
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

/**
 * Spillway as the benchmarks and chaos runs see it: real `spillway start --role <r>` processes on a
 * random prefix, configured through ConfigStore (the same writes the admin API makes), fed through
 * the ingest port with GitHub-signed bodies. Each piece is probed before use so that a benchmark
 * can say precisely which piece is missing instead of timing a stub.
 */
import { createHmac, randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ConfigStore } from '@spillway/router';
import {
  createKeys,
  createRedis,
  type Endpoint,
  loadConfig,
  type Source,
  secretBoxOf,
  type Tenant,
} from '@spillway/shared';
import { withKafkaAdmin } from '../../helpers/kafka-broker.ts';
import { makeEndpoint, makeTenant } from '../../helpers/router-fixtures.ts';
import { sleep, waitFor } from '../../helpers/wait.ts';
import { type Proc, run } from './procs.ts';

/**
 * The product under test. `SPILLWAY_BENCH_BIN=<checkout>/packages/router/bin/spillway.mjs` runs
 * another built checkout's roles under this harness (how an older tree is compared with this one in
 * the same run: docs/benchmarks/profile.md, "Did the router layout change cost speed?").
 */
export const SPILLWAY_BIN =
  process.env.SPILLWAY_BENCH_BIN ??
  fileURLToPath(new URL('../../../packages/router/bin/spillway.mjs', import.meta.url));
export const REDIS_URL = process.env.SPILLWAY_REDIS_URL ?? 'redis://127.0.0.1:6390';
export const KAFKA_BROKERS = process.env.SPILLWAY_KAFKA_BROKERS ?? '127.0.0.1:9092';

export type RoleName = 'all' | 'ingest' | 'worker' | 'admin';

export interface RoleProc {
  role: RoleName;
  proc: Proc;
  adminPort: number;
  ingestPort?: number;
  env: Record<string, string>;
}

export function signGithub(secret: string, body: Buffer): string {
  return `sha256=${createHmac('sha256', secret).update(body).digest('hex')}`;
}

/**
 * A JSON body of about `size` bytes with `sentAt` first (the sink reads it from the first bytes).
 * `delivery`, when given, goes into the body: GitHub and Shopify bodies are deduplicated on
 * sha256(body) (docs/ingest.md, "Replays"), so a load that must be accepted sends distinct bodies.
 */
export function eventBody(
  size = 1024,
  sentAt = performance.timeOrigin + performance.now(),
  delivery?: string,
): Buffer {
  const id = delivery === undefined ? '' : `"delivery":${JSON.stringify(delivery)},`;
  const head = `{"sentAt":${sentAt.toFixed(3)},${id}"action":"opened","repository":{"full_name":"spillway/bench"},"pad":"`;
  const tail = '"}';
  return Buffer.from(head + 'x'.repeat(Math.max(0, size - head.length - tail.length)) + tail);
}

export interface SpillwayEnvOptions {
  /** Another built checkout's `spillway.mjs` to run the roles from (default SPILLWAY_BIN). */
  bin?: string;
  redisUrl?: string;
  kafkaBrokers?: string;
  extra?: Record<string, string>;
}

export class SpillwayCluster {
  readonly prefix: string;
  readonly env: Record<string, string>;
  readonly redis;
  readonly store: ConfigStore;
  readonly roles: RoleProc[] = [];
  readonly adminToken: string;
  readonly bin: string;

  constructor(label: string, o: SpillwayEnvOptions = {}) {
    this.bin = o.bin ?? SPILLWAY_BIN;
    this.prefix = `${label}-${randomBytes(3).toString('hex')}`;
    this.adminToken = `bench-${randomBytes(12).toString('hex')}`;
    this.env = {
      SPILLWAY_REDIS_URL: o.redisUrl ?? REDIS_URL,
      SPILLWAY_KAFKA_BROKERS: o.kafkaBrokers ?? KAFKA_BROKERS,
      SPILLWAY_PREFIX: this.prefix,
      SPILLWAY_SPILL_TOPIC: `${this.prefix}.spill`,
      SPILLWAY_SPILL_PARTITIONS: '4',
      SPILLWAY_ADMIN_PORT: '0',
      SPILLWAY_INGEST_PORT: '0',
      SPILLWAY_HOST: '127.0.0.1',
      SPILLWAY_ADMIN_TOKEN: this.adminToken,
      SPILLWAY_SECRET_KEY: randomBytes(32).toString('base64'),
      SPILLWAY_LOG_LEVEL: process.env.SPILLWAY_BENCH_LOG_LEVEL ?? 'warn',
      SPILLWAY_TARGET_ALLOW_CIDRS: '127.0.0.1/32',
      ...o.extra,
    };
    const config = loadConfig(this.env);
    this.redis = createRedis(config.redis, { maxRetriesPerRequest: 1 });
    this.redis.on('error', () => {});
    this.store = new ConfigStore(this.redis, createKeys(this.prefix), secretBoxOf(config).box);
  }

  async tenant(id: string, limits: Partial<Tenant['limits']> = {}): Promise<Tenant> {
    return makeTenant(this.store, { maxInFlight: 1000, ...limits }, id);
  }

  async endpoint(
    tenantId: string,
    id: string,
    url: string,
    extra: Partial<Endpoint> = {},
  ): Promise<Endpoint> {
    return makeEndpoint(this.store, tenantId, url, { id, ...extra });
  }

  async githubSource(tenantId: string, id: string, extra: Partial<Source> = {}): Promise<Source> {
    return this.store.createSource({
      id,
      tenantId,
      kind: 'github',
      secret: randomBytes(20).toString('hex'),
      maxBodyBytes: 1024 * 1024,
      createdAt: new Date().toISOString(),
      ...extra,
    });
  }

  /** Starts `spillway start --role <role>` as a child process and waits for its URLs. */
  async startRole(role: RoleName, extra: Record<string, string> = {}, timeoutMs = 45_000): Promise<RoleProc> {
    const env: Record<string, string> = {
      PATH: process.env.PATH ?? '',
      HOME: process.env.HOME ?? '/root',
      ...this.env,
      ...extra,
    };
    // SPILLWAY_BENCH_PROFILE=<dir>: each role process writes a V8 CPU profile there when it stops.
    const prof = process.env.SPILLWAY_BENCH_PROFILE;
    if (prof) env.NODE_OPTIONS = `--cpu-prof --cpu-prof-dir=${prof}`;
    // SPILLWAY_BENCH_NODE_OPTIONS: more Node options for every role process (e.g. an --import preload).
    const more = process.env.SPILLWAY_BENCH_NODE_OPTIONS;
    if (more) env.NODE_OPTIONS = `${env.NODE_OPTIONS ?? ''} ${more}`.trim();
    const proc = run(process.execPath, [this.bin, 'start', '--role', role], env);
    const adminPort = Number(
      await waitFor(
        () => {
          if (proc.child.exitCode !== null)
            throw new Error(
              `spillway --role ${role} exited ${proc.child.exitCode}: ${proc.err().trim().slice(-600)}`,
            );
          return /admin:\s+http:\/\/[\d.]+:(\d+)/.exec(proc.out())?.[1];
        },
        `spillway --role ${role} to print its URLs`,
        timeoutMs,
      ),
    );
    await sleep(100);
    const ingest = /ingest:\s+https?:\/\/[\d.]+:(\d+)/.exec(proc.out())?.[1];
    const r: RoleProc = { role, proc, adminPort, ingestPort: ingest ? Number(ingest) : undefined, env };
    this.roles.push(r);
    return r;
  }

  async metrics(r: RoleProc): Promise<string> {
    const res = await fetch(`http://127.0.0.1:${r.adminPort}/metrics`);
    return res.text();
  }

  /** Stops every role process, deletes the prefix's Redis keys and Kafka topic. */
  async close(opts: { keepData?: boolean } = {}): Promise<void> {
    // SPILLWAY_BENCH_METRICS=<dir>: each role's /metrics, as it stood at the end, is written there.
    const dir = process.env.SPILLWAY_BENCH_METRICS;
    if (dir)
      for (const r of this.roles) {
        const text = await this.metrics(r).catch((err: unknown) => `# unreadable: ${String(err)}\n`);
        writeFileSync(join(dir, `${r.role}-${r.proc.child.pid}.prom`), text);
      }
    await Promise.all(this.roles.map((r) => r.proc.stop(5000)));
    if (!opts.keepData) {
      await deletePrefix(this.redis, this.prefix).catch(() => {});
      await deleteTopic(this.env.SPILLWAY_KAFKA_BROKERS!, this.env.SPILLWAY_SPILL_TOPIC!).catch(() => {});
    }
    this.redis.disconnect();
  }
}

/** UNLINKs every key of a prefix (config, BullMQ queues under `{prefix}`) in bounded batches. */
export async function deletePrefix(redis: ReturnType<typeof createRedis>, prefix: string): Promise<number> {
  let n = 0;
  if (!('scanStream' in redis)) return 0;
  for (const pattern of [`${prefix}:*`, `{${prefix}}:*`]) {
    let cursor = '0';
    for (let i = 0; i < 100_000; i++) {
      const [next, keys] = (await redis.scan(cursor, 'MATCH', pattern, 'COUNT', 1000)) as [string, string[]];
      if (keys.length) n += Number(await redis.unlink(...keys));
      cursor = next;
      if (cursor === '0') break;
    }
  }
  return n;
}

export async function deleteTopic(brokers: string, topic: string): Promise<void> {
  await withKafkaAdmin(brokers, 'spw-bench-cleanup', async (admin) => {
    const topics = await admin.listTopics();
    if (topics.includes(topic)) await admin.deleteTopics({ topics: [topic], timeout: 10_000 });
  });
}

/** One signed GitHub delivery; returns the HTTP status. */
export async function postGithub(
  port: number,
  source: Source,
  deliveryId: string,
  body: Buffer,
  dispatcher?: import('undici').Dispatcher,
  scheme: 'http' | 'https' = 'http',
): Promise<number> {
  const { request } = await import('undici');
  const res = await request(`${scheme}://127.0.0.1:${port}/ingest/${source.id}`, {
    method: 'POST',
    body,
    dispatcher,
    headers: {
      'content-type': 'application/json',
      'x-github-event': 'push',
      'x-github-delivery': deliveryId,
      'x-hub-signature-256': signGithub(source.secret, body),
    },
  });
  await res.body.dump();
  return res.statusCode;
}

/**
 * The router's durable intake, opened in the load generator's own process: the same group-committed
 * enqueue the ingest role and the events API use, without an HTTP hop in front (the ingest ceiling
 * benchmark measures that hop). Used to feed the delivery benchmarks.
 */
export async function openIntake(c: SpillwayCluster) {
  const { createIntake } = await import('@spillway/router');
  const { createLogger } = await import('@spillway/shared');
  const config = loadConfig(c.env);
  const intake = createIntake({
    redis: c.redis,
    keys: createKeys(c.prefix),
    logger: createLogger('warn'),
    config,
  });
  let seq = 0;
  const tag = randomBytes(3).toString('hex');
  return {
    intake,
    /** Submits one event whose body carries `sentAt` (now); resolves once durable. */
    submit(tenantId: string, bodySize = 256, type = 'push') {
      const id = `${tag}-${++seq}`;
      return intake.submit({
        tenantId,
        id,
        type,
        receivedAt: Date.now(),
        contentType: 'application/json',
        body: eventBody(bodySize),
      });
    },
    close: () => intake.close(),
  };
}

export interface TenantCounters {
  queued: number;
  inFlight: number;
  creditsUsed: number;
  spilled: number;
  retrying: number;
  delivered: number;
  failed: number;
  workers: number;
}

/** Sums what every live worker published for one tenant (the same numbers the admin stats sum). */
export async function tenantCounters(c: SpillwayCluster, tid: string): Promise<TenantCounters> {
  const keys = createKeys(c.prefix);
  const sum: TenantCounters = {
    queued: 0,
    inFlight: 0,
    creditsUsed: 0,
    spilled: 0,
    retrying: 0,
    delivered: 0,
    failed: 0,
    workers: 0,
  };
  const ids = (await c.redis.zrange(keys.workers, 0, -1)) as string[];
  for (const id of ids) {
    const raw = await c.redis.get(keys.workerStats(id));
    if (!raw) continue;
    sum.workers++;
    const t = (JSON.parse(raw) as { tenants: Record<string, Partial<TenantCounters>> }).tenants[tid];
    if (!t) continue;
    for (const k of [
      'queued',
      'inFlight',
      'creditsUsed',
      'spilled',
      'retrying',
      'delivered',
      'failed',
    ] as const)
      sum[k] += t[k] ?? 0;
  }
  return sum;
}

/** Submits `perSecond` events for `durationMs` on a 10 ms tick (open loop: never waits for delivery). */
export async function openLoop(
  submit: () => Promise<unknown>,
  perSecond: number,
  durationMs: number,
): Promise<{ sent: number; errors: number }> {
  const start = performance.now();
  let sent = 0;
  let errors = 0;
  const pending = new Set<Promise<unknown>>();
  for (let i = 0; i < 1_000_000; i++) {
    const elapsed = performance.now() - start;
    if (elapsed >= durationMs) break;
    const due = Math.floor((elapsed / 1000) * perSecond) - sent;
    for (let j = 0; j < due; j++) {
      const p = submit().catch(() => errors++);
      pending.add(p);
      void p.finally(() => pending.delete(p));
      sent++;
    }
    await sleep(10);
  }
  await Promise.all(pending);
  return { sent, errors };
}

/** "worker pid 123 exited 1: <last stderr lines>" for a role process that died on its own. */
export function describeDeath(r: RoleProc): string {
  const tail = (r.proc.err() || r.proc.out()).trim().split('\n').slice(-4).join(' | ').slice(-600);
  return `${r.role} pid ${r.proc.pid} exited ${r.proc.child.exitCode ?? r.proc.child.signalCode}: ${tail}`;
}

/** Commands the Redis server has processed so far (INFO stats): deltas give Redis calls per delivery. */
/** `INFO commandstats` as calls and µs per command name (Lua's inner calls under their own names). */
export function commandStats(info: string): Map<string, { calls: number; usec: number }> {
  const m = new Map<string, { calls: number; usec: number }>();
  for (const line of info.split('\n')) {
    const x = /^cmdstat_([^:]+):calls=(\d+),usec=(\d+)/.exec(line.trim());
    if (x) m.set(x[1]!, { calls: Number(x[2]), usec: Number(x[3]) });
  }
  return m;
}

export async function redisCommands(c: SpillwayCluster): Promise<number> {
  const info = String(await c.redis.info('stats'));
  return Number(/total_commands_processed:(\d+)/.exec(info)?.[1] ?? Number.NaN);
}

/** The Redis server's CPU time so far (user + system, all its threads), in µs. */
export async function redisCpuMicros(c: SpillwayCluster): Promise<number> {
  const info = String(await c.redis.info('cpu'));
  const of = (k: string) => Number(new RegExp(`${k}:([\\d.]+)`).exec(info)?.[1] ?? Number.NaN);
  return (of('used_cpu_user') + of('used_cpu_sys')) * 1e6;
}

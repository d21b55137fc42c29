import { randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import {
  ConfigStore,
  createRouterServices,
  createRuntime,
  createWorker,
  ensureSpillTopic,
  type Runtime,
  type WorkerHandle,
} from '@spillway/router';
import {
  type Endpoint,
  loadConfig,
  type SpillwayEvent,
  type Tenant,
  type TenantLimits,
} from '@spillway/shared';
import { afterAll } from 'vitest';
import { testConfig, testEnv } from './env.ts';
import { withKafkaAdmin } from './kafka-broker.ts';
import { type Spawned, spawnSpillway } from './spawn.ts';
import { waitFor } from './wait.ts';

/** A receiver on 127.0.0.1:0 that counts every webhook-id it got (duplicates counted). */
export interface Receiver {
  url: string;
  /** webhook-id → how many times it arrived with a 2xx answer. */
  got: Map<string, number>;
  /** Requests seen, including the ones answered with an error. */
  requests: number;
  /**
   * What to answer (given the request and its whole body); default 200 immediately. `answering`
   * runs just before the answer is written, so a test can count a request open until then.
   */
  behave: (
    req: IncomingMessage,
    body: Buffer,
  ) => { status: number; delayMs?: number; answering?: () => void };
  close(): Promise<void>;
}

export async function startReceiver(behave: Receiver['behave'] = () => ({ status: 200 })): Promise<Receiver> {
  const r: Receiver = { url: '', got: new Map(), requests: 0, behave, close: async () => {} };
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      r.requests++;
      const { status, delayMs, answering } = r.behave(req, Buffer.concat(chunks));
      const answer = () => {
        answering?.();
        if (status >= 200 && status < 300) {
          const id = String(req.headers['webhook-id']);
          r.got.set(id, (r.got.get(id) ?? 0) + 1);
        }
        res.writeHead(status).end();
      };
      if (delayMs) setTimeout(answer, delayMs);
      else answer();
    });
  });
  server.keepAliveTimeout = 1000;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  r.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`;
  r.close = () =>
    new Promise<void>((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    });
  return r;
}

/** Environment overrides every router test needs. */
export const ROUTER_TEST_ENV = {
  SPILLWAY_TARGET_ALLOW_CIDRS: '127.0.0.1/32',
  SPILLWAY_RETRY_SCHEDULE: '100ms,200ms',
  SPILLWAY_GROUP_COMMIT: '2ms',
};

export function routerRuntime(overrides: Record<string, string> = {}): Runtime {
  return createRuntime(testConfig({ ...ROUTER_TEST_ENV, ...overrides }));
}

export async function makeTenant(
  store: ConfigStore,
  limits: Partial<TenantLimits> = {},
  id = `ten-${randomBytes(3).toString('hex')}`,
): Promise<Tenant> {
  return store.createTenant({
    id,
    limits: { maxInFlight: 100, concurrency: 16, ...limits },
    status: 'active',
    createdAt: new Date().toISOString(),
  });
}

export async function makeEndpoint(
  store: ConfigStore,
  tenantId: string,
  url: string,
  extra: Partial<Endpoint> = {},
): Promise<Endpoint> {
  return store.createEndpoint({
    id: `ep-${randomBytes(3).toString('hex')}`,
    tenantId,
    url,
    eventTypes: ['*'],
    secret: `whsec_${randomBytes(24).toString('base64')}`,
    timeoutMs: 5000,
    status: 'active',
    createdAt: new Date().toISOString(),
    ...extra,
  });
}

export function makeEvent(tenantId: string, id: string, type = 'order.created'): SpillwayEvent {
  return {
    tenantId,
    id,
    type,
    receivedAt: Date.now(),
    contentType: 'application/json',
    body: Buffer.from(JSON.stringify({ id, n: 1 })),
  };
}

/** Creates the per-test spill topic with `partitions` partitions (1 forces tenants to share one). */
export async function createSpillTopic(rt: Runtime, partitions?: number): Promise<void> {
  return ensureSpillTopic(rt, partitions);
}

/** Deletes the per-test spill topic (best effort). */
export async function dropSpillTopic(brokers: string[], topic: string): Promise<void> {
  await withKafkaAdmin(brokers, 'router-test-cleanup', (admin) =>
    admin.deleteTopics({ topics: [topic], timeout: 5000 }),
  ).catch(() => {}); // best effort
}

/** One router under test: runtime, spill topic, config store, services, and workers/receivers on demand. */
export interface RouterHarness {
  rt: Runtime;
  store: ConfigStore;
  services: ReturnType<typeof createRouterServices>;
  /**
   * Another runtime on the same config: its own connections, worker id and Kafka group member, as
   * a separate process would have.
   */
  runtime(): Runtime;
  /** A worker on `on` (the harness's runtime when omitted). */
  worker(on?: Runtime): Promise<WorkerHandle>;
  stopWorker(w: WorkerHandle): Promise<void>;
  receiver(behave?: Receiver['behave']): Promise<Receiver>;
}

/**
 * Builds a RouterHarness against the suite's Redis and Kafka (random prefix and topic) and pushes
 * its teardown — workers, receivers, services, runtime, topic — onto `cleanup` (run in afterEach).
 */
export async function routerHarness(
  cleanup: (() => Promise<void>)[],
  env: Record<string, string> = {},
  partitions?: number,
): Promise<RouterHarness> {
  const rt = routerRuntime(env);
  await createSpillTopic(rt, partitions);
  const store = new ConfigStore(rt.redis, rt.keys, rt.secrets);
  const services = createRouterServices(rt);
  const workers = new Set<WorkerHandle>();
  const receivers: Receiver[] = [];
  const runtimes: Runtime[] = [];
  cleanup.push(async () => {
    for (const w of workers) await w.close();
    for (const r of receivers) await r.close();
    await services.close();
    for (const other of runtimes) await other.close();
    await rt.close();
    await dropSpillTopic(rt.config.kafkaBrokers, rt.config.spillTopic);
  });
  return {
    rt,
    store,
    services,
    runtime() {
      const other = createRuntime(rt.config);
      runtimes.push(other);
      return other;
    },
    async worker(on = rt) {
      const w = await createWorker(on);
      workers.add(w);
      return w;
    },
    async stopWorker(w) {
      await w.close();
      workers.delete(w);
    },
    async receiver(behave) {
      const r = await startReceiver(behave);
      receivers.push(r);
      return r;
    },
  };
}

/**
 * For a suite that kills worker processes: the environment they share (ROUTER_TEST_ENV and
 * `overrides`), a runtime on it for the test's own intake and store, and `startWorker()` — a
 * `spillway start --role worker` child, resolved once it runs. Registers an afterAll that SIGKILLs
 * the children still up, closes the runtime and drops the spill topic.
 */
export function workerProcessFixture(overrides: Record<string, string> = {}) {
  const env = testEnv({ ...ROUTER_TEST_ENV, ...overrides });
  const rt = createRuntime(loadConfig(env));
  const children: Spawned[] = [];
  afterAll(async () => {
    for (const c of children) if (c.child.exitCode === null) c.child.kill('SIGKILL');
    await rt.close();
    await dropSpillTopic(rt.config.kafkaBrokers, rt.config.spillTopic);
  });
  const startWorker = async (): Promise<Spawned> => {
    const c = spawnSpillway(['start', '--role', 'worker'], env);
    children.push(c);
    await waitFor(
      () => /running/.test(c.stdout()) || c.child.exitCode !== null,
      'the worker to start',
      30_000,
    );
    if (c.child.exitCode !== null) throw new Error(`the worker exited ${c.child.exitCode}: ${c.stderr()}`);
    return c;
  };
  return { env, rt, startWorker };
}

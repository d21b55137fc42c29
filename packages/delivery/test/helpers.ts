import http from 'node:http';
import type { AddressInfo } from 'node:net';
import {
  type Config,
  createKeys,
  createLogger,
  createRedis,
  type Endpoint,
  type RedisClient,
  type SpillwayEvent,
  type Tenant,
} from '@spillway/shared';
import { afterAll, afterEach, beforeAll } from 'vitest';
import { type DeliveryTask, Dispatcher, type DispatcherOptions } from '../src/index.ts';

/** A real receiver on loopback, recording what it got and answering with `handler`. */
export interface Receiver {
  url: string;
  port: number;
  requests: { url: string; headers: http.IncomingHttpHeaders; body: Buffer; at: number }[];
  /** Requests whose response has not been sent yet. */
  open(): number;
  maxOpen(): number;
  close(): Promise<void>;
}

export async function receiver(
  handler: (req: http.IncomingMessage, res: http.ServerResponse, body: Buffer) => void = (_q, res) =>
    res.end('ok'),
  host = '127.0.0.1',
): Promise<Receiver> {
  const requests: Receiver['requests'] = [];
  let open = 0;
  let maxOpen = 0;
  const sockets = new Set<import('node:net').Socket>();
  const server = http.createServer((req, res) => {
    open++;
    maxOpen = Math.max(maxOpen, open);
    let counted = true;
    const done = () => {
      if (counted) {
        counted = false;
        open--;
      }
    };
    res.on('finish', done);
    res.on('close', done);
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      requests.push({ url: req.url ?? '', headers: req.headers, body, at: Date.now() });
      handler(req, res, body);
    });
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://${host.includes(':') ? `[${host}]` : host}:${port}/hook`,
    port,
    requests,
    open: () => open,
    maxOpen: () => maxOpen,
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

export function tenant(id: string, limits: Partial<Tenant['limits']> = {}): Tenant {
  return {
    id,
    limits: { maxInFlight: 1000, concurrency: 16, ...limits },
    status: 'active',
    createdAt: new Date().toISOString(),
  };
}

export function endpoint(tenantId: string, id: string, url: string, extra: Partial<Endpoint> = {}): Endpoint {
  return {
    id,
    tenantId,
    url,
    eventTypes: ['*'],
    secret: `whsec_${Buffer.alloc(24, 7).toString('base64')}`,
    timeoutMs: 2_000,
    status: 'active',
    createdAt: new Date().toISOString(),
    ...extra,
  };
}

let seq = 0;
export function task(
  tenantId: string,
  endpointId: string,
  body: unknown = { hello: 'world' },
  attempt = 1,
  eventId = `ev_${++seq}`,
): DeliveryTask {
  const event: SpillwayEvent = {
    tenantId,
    id: eventId,
    type: 'order.created',
    receivedAt: Date.now(),
    contentType: 'application/json',
    body: Buffer.from(JSON.stringify(body)),
  };
  return { tenantId, eventId, endpointId, attempt, event };
}

export function percentile(values: number[], p: number): number {
  const s = [...values].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)]!;
}

/**
 * Registers the hooks of a file of dispatcher tests: one Redis connection for the file, and the
 * dispatchers and receivers each test makes through the returned functions closed after it.
 */
export function dispatcherFixtures(config: Readonly<Config>) {
  let redis: RedisClient;
  const receivers: Receiver[] = [];
  const dispatchers: Dispatcher[] = [];
  beforeAll(() => {
    redis = createRedis(config.redis);
  });
  afterAll(() => redis.disconnect());
  afterEach(async () => {
    for (const d of dispatchers.splice(0)) await d.close();
    for (const r of receivers.splice(0)) await r.close();
  });
  return {
    redis: () => redis,
    /** A Dispatcher on the file's Redis and the config's prefix and allowlist (`extra` overrides). */
    dispatcher(extra: Partial<DispatcherOptions> = {}): Dispatcher {
      const d = new Dispatcher({
        redis,
        keys: createKeys(config.prefix),
        logger: createLogger('silent'),
        allowCidrs: [...config.targetAllowCidrs],
        ...extra,
      });
      dispatchers.push(d);
      return d;
    },
    async receiver(...args: Parameters<typeof receiver>): Promise<Receiver> {
      const r = await receiver(...args);
      receivers.push(r);
      return r;
    },
  };
}

/**
 * An outcome without what the attempt history adds (its latency and the response excerpt), for
 * comparing the classification exactly.
 */
export function core<T extends object>(o: T): Omit<T, 'durationMs' | 'excerpt'> {
  const { durationMs: _d, excerpt: _x, ...rest } = o as T & { durationMs?: unknown; excerpt?: unknown };
  return rest;
}

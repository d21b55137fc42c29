import { randomBytes } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Command } from 'commander';
import { type AdminClient, seg } from './client.ts';
import { printJson, printKv } from './output.ts';

/**
 * `spillway bench`: an end-to-end check of a running Spillway from the operator's seat. It starts a
 * sink (HTTP 200) in this process, creates a throwaway tenant with one endpoint pointing at it, posts
 * N events through the events API at a fixed concurrency, and waits until the sink has every one.
 * It reports the accept rate and latency of the API and the delivery latency (accept → sink), then
 * deletes the tenant. The workers must be allowed to reach the sink: on one machine that means
 * SPILLWAY_TARGET_ALLOW_CIDRS=127.0.0.1/32 on the server (loopback is refused otherwise).
 * The repo's full benchmark suite with peers is `pnpm bench` (test/bench); this is its smoke version.
 */
export interface BenchResult {
  events: number;
  concurrency: number;
  accepted: number;
  delivered: number;
  acceptPerSec: number;
  acceptP50Ms: number;
  acceptP99Ms: number;
  deliveredPerSec: number;
  deliveryP50Ms: number;
  deliveryP99Ms: number;
  wallMs: number;
}

function pct(sorted: number[], p: number): number {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

const round = (n: number) => Math.round(n * 10) / 10;

export async function runBench(
  client: AdminClient,
  opts: { events: number; concurrency: number; sinkHost: string; timeoutMs: number },
): Promise<BenchResult> {
  const acceptedAt = new Map<string, number>();
  const deliveryMs: number[] = [];
  const seen = new Set<string>();
  const sink = http.createServer((req, res) => {
    const id = String(req.headers['webhook-id'] ?? '');
    req.resume();
    req.on('end', () => {
      const t = acceptedAt.get(id);
      if (!seen.has(id) && t !== undefined) {
        seen.add(id);
        deliveryMs.push(performance.now() - t);
      }
      res.end();
    });
  });
  await new Promise<void>((r) => sink.listen(0, opts.sinkHost, r));
  const tid = `bench-${randomBytes(4).toString('hex')}`;
  try {
    // The events API's default rate would make the bench measure the limiter: this throwaway tenant
    // gets a rate and quota far above what one CLI process can post.
    await client.post('/v1/tenants', {
      id: tid,
      limits: {
        maxInFlight: 10_000,
        concurrency: 64,
        eventRate: { perSecond: 1_000_000, burst: 1_000_000 },
        eventsPerDay: Math.max(1, opts.events),
      },
    });
    const { port } = sink.address() as AddressInfo;
    const host = opts.sinkHost.includes(':') ? `[${opts.sinkHost}]` : opts.sinkHost;
    await client.post(`/v1/tenants/${tid}/endpoints`, { id: 'sink', url: `http://${host}:${port}/sink` });

    const acceptMs: number[] = [];
    let next = 0;
    const started = performance.now();
    const body = JSON.stringify({ bench: true, pad: 'x'.repeat(200) });
    const payload = JSON.parse(body) as unknown;
    const lane = async () => {
      for (;;) {
        const i = next++;
        if (i >= opts.events) return;
        const id = `b${i}`;
        const t0 = performance.now();
        acceptedAt.set(id, t0);
        await client.post(`/v1/tenants/${seg(tid)}/events`, { id, type: 'bench.event', payload });
        acceptMs.push(performance.now() - t0);
      }
    };
    await Promise.all(Array.from({ length: Math.min(opts.concurrency, opts.events) }, lane));
    const acceptWall = performance.now() - started;
    const deadline = Date.now() + opts.timeoutMs;
    while (seen.size < opts.events && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    const wall = performance.now() - started;
    if (seen.size < opts.events) {
      throw new Error(
        `only ${seen.size}/${opts.events} events reached the sink within ${opts.timeoutMs} ms ` +
          `(is SPILLWAY_TARGET_ALLOW_CIDRS on the server allowing ${opts.sinkHost}? see: spillway dlq list ${tid})`,
      );
    }
    acceptMs.sort((a, b) => a - b);
    deliveryMs.sort((a, b) => a - b);
    return {
      events: opts.events,
      concurrency: opts.concurrency,
      accepted: acceptMs.length,
      delivered: seen.size,
      acceptPerSec: round((acceptMs.length / acceptWall) * 1000),
      acceptP50Ms: round(pct(acceptMs, 50)),
      acceptP99Ms: round(pct(acceptMs, 99)),
      deliveredPerSec: round((seen.size / wall) * 1000),
      deliveryP50Ms: round(pct(deliveryMs, 50)),
      deliveryP99Ms: round(pct(deliveryMs, 99)),
      wallMs: Math.round(wall),
    };
  } finally {
    await client.delete(`/v1/tenants/${tid}`).catch(() => {});
    await new Promise((r) => sink.close(r));
  }
}

export function registerBenchCommand(
  program: Command,
  ctx: (cmd: Command) => { client: AdminClient; json: boolean },
): void {
  const int = (v: string) => {
    if (!/^[1-9]\d*$/.test(v)) throw new Error(`expected a positive whole number (got "${v}")`);
    return Number(v);
  };
  program
    .command('bench')
    .description(
      'post events through the admin API to a local sink and measure accept and delivery (needs the sink address allowed by SPILLWAY_TARGET_ALLOW_CIDRS)',
    )
    .option('--events <n>', 'events to send', int, 2000)
    .option('--concurrency <n>', 'requests in flight', int, 32)
    .option('--sink-host <addr>', 'address the sink listens on (reachable by the workers)', '127.0.0.1')
    .option('--timeout-ms <n>', 'how long to wait for every delivery', int, 60_000)
    .action(
      async (
        o: { events: number; concurrency: number; sinkHost: string; timeoutMs: number },
        cmd: Command,
      ) => {
        const { client, json } = ctx(cmd);
        const r = await runBench(client, o);
        json ? printJson(r) : printKv(r as unknown as Record<string, unknown>);
      },
    );
}

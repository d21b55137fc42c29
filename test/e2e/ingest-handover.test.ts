/**
 * Restarts that refuse no connection (docs/operations.md, "Restarts"): `spillway start --role
 * ingest` runs under a steady load of signed GitHub deliveries (500 req/s on loopback: half on 16
 * keep-alive connections, half each on a new connection, so SYNs keep arriving through every
 * handover) and is restarted five times with SIGUSR2, each time handing its listening sockets to
 * a successor that then serves them. Every request must get a 2xx — no connection refused, reset or
 * cut — and every event answered 202 must be durable (in the intake queue; no worker runs here).
 * Both backends: on io_uring the successor's ring adopts the inherited socket.
 */
import { randomBytes } from 'node:crypto';
import http from 'node:http';
import { createKeys, createQueue } from '@spillway/shared';
import { afterAll, describe, expect, it } from 'vitest';
import { probeUring } from '../../packages/ingest/src/backends/uring.ts';
import { freePort } from '../conformance/support.ts';
import { testEnv } from '../helpers/env.ts';
import { githubHeaders } from '../helpers/github.ts';
import { seedGithubSource } from '../helpers/github-source.ts';
import { alive, type Spawned, spawnSpillway } from '../helpers/spawn.ts';
import { waitFor } from '../helpers/wait.ts';

const RATE = 500;
const RESTARTS = 5;
/** Load between a successor's ready and the next SIGUSR2 (a restart itself takes a process start). */
const BETWEEN_MS = 500;

const pids = (out: string) =>
  [...out.matchAll(/spillway ingest running \(pid (\d+)\)/g)].map((m) => Number(m[1]));

const backends = probeUring().ok ? (['uring', 'node'] as const) : (['node'] as const);

describe.each(backends)('ingest handover on SIGUSR2 (%s)', (backend) => {
  const cleanups: (() => Promise<void> | void)[] = [];
  afterAll(async () => {
    for (const c of cleanups.reverse()) await c();
  });

  it(`${RESTARTS} restarts under ${RATE} req/s: 0 connection errors, 0 non-2xx, every 202 durable`, async () => {
    const ingestPort = await freePort();
    const env = testEnv({
      SPILLWAY_INGEST_BACKEND: backend,
      SPILLWAY_INGEST_PORT: String(ingestPort),
      SPILLWAY_ADMIN_PORT: String(await freePort()),
      SPILLWAY_LOG_LEVEL: 'warn',
    });
    const keys = createKeys(env.SPILLWAY_PREFIX!);
    const { sourceId, redis } = await seedGithubSource(env);
    cleanups.push(() => void redis.disconnect());

    const first: Spawned = spawnSpillway(['start', '--role', 'ingest'], env);
    cleanups.push(async () => {
      // The last successor is nobody's child here: stop it by pid.
      for (const pid of pids(first.stdout())) if (alive(pid)) process.kill(pid, 'SIGTERM');
      await waitFor(() => pids(first.stdout()).every((p) => !alive(p)), 'ingest processes to exit', 15_000);
    });
    await waitFor(() => pids(first.stdout()).length === 1, `ingest (${backend}) to start`, 30_000);

    const agent = new http.Agent({ keepAlive: true, maxSockets: 16 });
    cleanups.push(() => agent.destroy());
    const outcomes = { ok: 0, non2xx: [] as number[], errors: [] as string[] };
    const accepted = new Set<string>();
    let n = 0;
    const send = async (): Promise<void> => {
      const fresh = n % 2 === 1;
      const body = `{"n":${n++},"r":"${randomBytes(4).toString('hex')}"}`;
      const delivery = `d-${randomBytes(8).toString('hex')}`;
      const headers = {
        ...(await githubHeaders('sec', body, delivery)),
        'content-length': String(Buffer.byteLength(body)),
        ...(fresh && { connection: 'close' }),
      };
      await new Promise<void>((resolve) => {
        const req = http.request(
          {
            host: '127.0.0.1',
            port: ingestPort,
            path: `/ingest/${sourceId}`,
            method: 'POST',
            headers,
            agent: fresh ? false : agent,
          },
          (res) => {
            res.resume();
            res.on('end', () => {
              const status = res.statusCode ?? 0;
              if (status >= 200 && status < 300) {
                outcomes.ok++;
                if (status === 202) accepted.add(delivery);
              } else outcomes.non2xx.push(status);
              resolve();
            });
          },
        );
        req.setTimeout(10_000, () => req.destroy(new Error('timeout')));
        req.on('error', (err: NodeJS.ErrnoException) => {
          outcomes.errors.push(err.code ?? err.message);
          resolve();
        });
        req.end(body);
      });
    };

    // The load: RATE requests per second in 10 ms ticks, for as long as the restarts take.
    const inflight = new Set<Promise<void>>();
    let loading = true;
    const load = (async () => {
      const start = Date.now();
      let sent = 0;
      while (loading) {
        const due = Math.floor(((Date.now() - start) * RATE) / 1000);
        for (; sent < due; sent++) {
          const p = send();
          inflight.add(p);
          void p.then(() => inflight.delete(p));
        }
        await new Promise((r) => setTimeout(r, 10));
      }
      await Promise.all(inflight);
      return sent;
    })();

    const handovers: { from: number; to: number; readyMs: number; exitMs: number }[] = [];
    for (let i = 0; i < RESTARTS; i++) {
      await new Promise((r) => setTimeout(r, BETWEEN_MS));
      const from = pids(first.stdout()).at(-1)!;
      const t0 = Date.now();
      process.kill(from, 'SIGUSR2');
      await waitFor(() => pids(first.stdout()).length === i + 2, `successor ${i + 1} to serve`, 20_000, 20);
      const to = pids(first.stdout()).at(-1)!;
      handovers.push({ from, to, readyMs: Date.now() - t0, exitMs: -1 });
      // The old process drains and exits on its own while the next restart begins.
      void waitFor(() => !alive(from), `pid ${from} to exit`, 20_000, 20).then(() => {
        handovers[i]!.exitMs = Date.now() - t0;
      });
    }
    await new Promise((r) => setTimeout(r, 1000));
    loading = false;
    const sent = await load;
    // Each predecessor stopped accepting, answered what it held and exited.
    await waitFor(() => handovers.every((h) => !alive(h.from)), 'every predecessor to exit', 20_000, 20);
    await waitFor(() => handovers.every((h) => h.exitMs >= 0), 'exit times', 1000, 20);

    console.log(
      `${backend}: ${sent} requests over ${RESTARTS} handovers (${handovers.map((h) => `${h.from}→${h.to} ready ${h.readyMs} ms, old gone ${h.exitMs} ms`).join('; ')}): ${outcomes.ok} 2xx, ${outcomes.non2xx.length} non-2xx, ${outcomes.errors.length} errors`,
    );
    expect(handovers).toHaveLength(RESTARTS);
    expect(new Set(handovers.map((h) => h.to)).size).toBe(RESTARTS);
    expect(outcomes.errors).toEqual([]);
    expect(outcomes.non2xx).toEqual([]);
    expect(outcomes.ok).toBe(sent);
    expect(sent).toBeGreaterThan(RATE * ((RESTARTS * BETWEEN_MS + 1000) / 1000) * 0.9);

    // Durable: every id answered 202 is in an intake job (group-committed batches; no worker here).
    const queue = createQueue(redis, keys, keys.intakeQueue);
    cleanups.push(() => queue.close());
    const jobs = await queue.getJobs(['wait', 'paused', 'prioritized', 'delayed']);
    const stored = new Set(
      jobs.flatMap((j) => (j.data as { events: { i: string }[] }).events.map((e) => e.i)),
    );
    const missing = [...accepted].filter((id) => !stored.has(id));
    expect(missing).toEqual([]);
  }, 120_000);
});

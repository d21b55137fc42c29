import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import net from 'node:net';
import { sign as githubSign } from '@octokit/webhooks-methods';
import { afterAll, describe, expect, it } from 'vitest';
import { probeUring } from '../../packages/ingest/src/backends/uring.ts';
import { freePort } from '../conformance/support.ts';
import { testEnv } from '../helpers/env.ts';
import { seedGithubSource } from '../helpers/github-source.ts';
import { type Spawned, spawnSpillway } from '../helpers/spawn.ts';
import { waitFor } from '../helpers/wait.ts';

/**
 * Unsent output is bounded per connection (issue 15, "Unbounded output queue"). The attack: 16
 * connections pipeline `GET / HTTP/1.1` as fast as the server reads and never read an answer. Each
 * request is cheap to send and gets a 404 the server has to keep until the client reads it; without
 * a bound on a connection's unsent output the server keeps parsing and queueing answers until it is
 * killed. Run against `spillway start --role ingest` on each backend: the ingest process's RSS may
 * grow by less than 32 MiB over the attack, and a well-behaved, signed sender keeps getting 202.
 *
 * Without the bound this grew the process by ~100 MiB (uring) and ~150 MiB (node) in 20 s; the
 * growth is steady from the first seconds, so ATTACK_MS (8 s; SPILLWAY_ATTACK_MS overrides) shows it.
 */
const ATTACK_MS = Number(process.env.SPILLWAY_ATTACK_MS ?? 8000);
const CONNECTIONS = 16;
const RSS_GROWTH_MAX = 32 * 1024 * 1024;
const REQUEST = 'GET / HTTP/1.1\r\nHost: x\r\n\r\n';

function rssOf(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  if (!m) throw new Error(`no VmRSS for ${pid}`);
  return Number(m[1]) * 1024;
}

/**
 * Pipelines REQUEST on one connection for as long as `until` allows, never reading; bounded by time.
 * From 127.0.0.2: its 404s spend that address's pre-auth allowance, not the signed sender's.
 */
function attacker(port: number, until: number): { sock: net.Socket; sent: () => number } {
  const sock = net.connect({ port, host: '127.0.0.1', localAddress: '127.0.0.2' });
  sock.pause();
  sock.on('error', () => {});
  const chunk = Buffer.from(REQUEST.repeat(512));
  let sent = 0;
  const pump = () => {
    while (Date.now() < until && !sock.destroyed) {
      sent += chunk.length;
      if (!sock.write(chunk)) return void sock.once('drain', pump);
    }
  };
  sock.once('connect', pump);
  return { sock, sent: () => sent };
}

/**
 * Pipelines 64 requests, reads their 64 answers, repeats for `ms`. From 127.0.0.3: the 404s it gets
 * spend that address's pre-auth allowance (after which it gets 429s, as cheap to answer).
 */
function politeClient(port: number, ms: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const until = Date.now() + ms;
    const sock = net.connect({ port, host: '127.0.0.1', localAddress: '127.0.0.3' });
    const burst = Buffer.from(REQUEST.repeat(64));
    let answers = 0;
    let total = 0;
    let tail = '';
    sock.on('error', reject);
    sock.on('connect', () => sock.write(burst));
    sock.on('data', (d: Buffer) => {
      const text = tail + d.toString('latin1');
      const parts = text.split('HTTP/1.1 ');
      answers += parts.length - 1;
      tail = parts.at(-1)!.slice(-8);
      if (answers < 64) return;
      total += answers;
      answers = 0;
      if (Date.now() < until) sock.write(burst);
      else {
        sock.destroy();
        resolve(total);
      }
    });
  });
}

// Where io_uring is blocked, SPILLWAY_ALLOW_NO_URING=1 is the explicit opt-out (as in the
// conformance suite); otherwise the uring case runs and fails loudly.
const skipUring = !probeUring().ok && process.env.SPILLWAY_ALLOW_NO_URING === '1';

for (const backend of ['uring', 'node'] as const) {
  describe.skipIf(backend === 'uring' && skipUring)(
    `ingest (${backend}) under a pipelining client that never reads`,
    () => {
      const procs: Spawned[] = [];
      const cleanups: (() => Promise<void> | void)[] = [];
      afterAll(async () => {
        for (const c of cleanups.reverse()) await c();
        for (const p of procs) {
          p.child.kill('SIGTERM');
          await p.exited;
        }
      });

      // On the node backend node:http parsed a whole 64 KiB read of pipelined requests (~2,300
      // here) before any handler could stop it, and V8 kept the heap their garbage grew: RSS rose
      // 0.4-77 MiB over the attack. The h1 server now feeds node:http its reads in 8 KiB slices
      // and stops between them once the socket is paused or destroyed (sliceReads in
      // packages/ingest/src/backends/h1.ts).
      it(`RSS grows < 32 MiB over ${ATTACK_MS} ms and a signed sender keeps getting 202`, async () => {
        const ingestPort = await freePort();
        const env = testEnv({
          SPILLWAY_INGEST_BACKEND: backend,
          SPILLWAY_INGEST_PORT: String(ingestPort),
          SPILLWAY_LOG_LEVEL: 'error',
        });
        const { sourceId, redis } = await seedGithubSource(env);
        cleanups.push(() => void redis.disconnect());

        const p = spawnSpillway(['start', '--role', 'ingest'], env);
        procs.push(p);
        let n = 0;
        const send = async (): Promise<number> => {
          const body = `{"n":${n++}}`;
          const res = await fetch(`http://127.0.0.1:${ingestPort}/ingest/${sourceId}`, {
            method: 'POST',
            body,
            headers: {
              'content-type': 'application/json',
              'x-hub-signature-256': await githubSign('sec', body),
              'x-github-event': 'push',
              'x-github-delivery': `d-${randomBytes(8).toString('hex')}`,
            },
            signal: AbortSignal.timeout(5000),
          });
          await res.arrayBuffer();
          return res.status;
        };
        await waitFor(
          async () => (await send().catch(() => 0)) === 202,
          `ingest (${backend}) to accept`,
          30_000,
          200,
        );
        // The banner names the backend that took the port.
        expect(p.stdout()).toContain(`ingest backend: ${backend}\n`);
        // Warm up what a normal request touches, so the baseline is not the cold process: signed
        // sends, then 16 clients that pipeline 64 requests at a time and read every answer.
        for (let i = 0; i < 50; i++) expect(await send()).toBe(202);
        await Promise.all(Array.from({ length: CONNECTIONS }, () => politeClient(ingestPort, 2000)));
        const pid = p.child.pid!;
        const before = rssOf(pid);

        const until = Date.now() + ATTACK_MS;
        const attackers = Array.from({ length: CONNECTIONS }, () => attacker(ingestPort, until));
        cleanups.push(() => {
          for (const a of attackers) a.sock.destroy();
        });
        let peak = before;
        const statuses: number[] = [];
        while (Date.now() < until) {
          statuses.push(await send().catch(() => 0));
          peak = Math.max(peak, rssOf(pid));
          await new Promise((r) => setTimeout(r, 100));
        }
        peak = Math.max(peak, rssOf(pid));
        const sentBytes = attackers.reduce((a, b) => a + b.sent(), 0);
        for (const a of attackers) a.sock.destroy();

        const growth = peak - before;
        console.log(
          `${backend}: rss before ${(before / 2 ** 20).toFixed(1)} MiB, peak ${(peak / 2 ** 20).toFixed(1)} MiB (+${(growth / 2 ** 20).toFixed(1)} MiB); attackers wrote ${(sentBytes / 2 ** 20).toFixed(1)} MiB; signed sender ${statuses.filter((s) => s === 202).length}/${statuses.length} 202`,
        );
        // The attack really ran: the clients got far more requests in than a bound lets through.
        expect(sentBytes).toBeGreaterThan(CONNECTIONS * REQUEST.length * 1000);
        // At least a few signed requests went through the attack (each waits for its answer; on a
        // loaded machine a node event loop busy with the attack answers them slowly, but answers).
        expect(statuses.length).toBeGreaterThanOrEqual(3);
        expect(statuses.every((s) => s === 202)).toBe(true);
        expect(growth).toBeLessThan(RSS_GROWTH_MAX);
      });
    },
  );
}

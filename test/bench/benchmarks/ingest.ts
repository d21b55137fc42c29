/**
 * Ingest ceiling: wrk POSTing 1 KiB GitHub-signed bodies, each with a unique X-GitHub-Delivery, at
 * nginx `return 202`, a bare node:http 202 server and Spillway's ingest role (node and uring
 * backends) on the full pipeline — source lookup, HMAC verify, dedup, durable group-committed
 * enqueue into Redis with AOF on — in one run, on the same cores.
 */

import { startNginx } from '../lib/nginx.ts';
import { forkTs } from '../lib/procs.ts';
import type { Goal, Row } from '../lib/report.ts';
import { eventBody, postGithub, SpillwayCluster, signGithub } from '../lib/spillway.ts';
import { runWrk, type WrkResult } from '../lib/wrk.ts';
import type { Benchmark } from './types.ts';

async function countKeys(c: SpillwayCluster, pattern: string): Promise<number> {
  let n = 0;
  let cursor = '0';
  for (let i = 0; i < 100_000; i++) {
    const [next, keys] = (await c.redis.scan(cursor, 'MATCH', pattern, 'COUNT', 5000)) as [string, string[]];
    n += keys.length;
    cursor = next;
    if (cursor === '0') break;
  }
  return n;
}

const BODY = eventBody(1024, 0);

export const ingest: Benchmark = {
  name: 'ingest',
  title: 'Ingest ceiling',
  method:
    'wrk (1 thread, 64 connections, keep-alive) POSTs a 1 KiB JSON body signed with X-Hub-Signature-256 and a unique X-GitHub-Delivery per request. Peers: nginx `return 202` (1 worker), a node:http server that reads the body and answers 202, and the two Spillway IngestServer backends with a handler that only reads the body and answers 202 (raw ack), each in its own process. Spillway: one `spillway start --role ingest` process per backend (`SPILLWAY_INGEST_BACKEND=node|uring`) on the full verified and durable path against the project Redis (AOF everysec). Each target gets a discarded warm-up run first. Full: 10 s per target; `--quick`: 3 s.',
  targets: [
    'Spillway ingest (node backend) ≥ 50 % of nginx `return 202` req/s (a naive http → HMAC → `Queue.add` path measured 13 %).',
    'uring backend ≥ 1.5 × node backend req/s (full pipeline; the raw-ack rows show the backends alone).',
  ],
  async run({ quick, log }) {
    const durationS = quick ? 3 : 10;
    const warmS = quick ? 1 : 2;
    const conns = 64;
    const rows: Row[] = [];
    const notes: string[] = [];
    const runTag = `b${Date.now().toString(36)}`;
    let acknowledged = 0;
    const measure = async (label: string, url: string, headers: Record<string, string>, unique?: string) => {
      const warm = await runWrk({
        url,
        body: BODY,
        headers,
        uniqueHeader: unique,
        runTag: `${runTag}w${label.length}`,
        threads: 1,
        connections: conns,
        durationS: warmS,
      });
      acknowledged = warm.requests - warm.non2xx;
      const r = await runWrk({
        url,
        body: BODY,
        headers,
        uniqueHeader: unique,
        runTag: `${runTag}m${rows.length}`,
        threads: 1,
        connections: conns,
        durationS,
      });
      log(`${label}: ${r.rps.toFixed(0)} req/s p50 ${r.p50Ms} ms p99 ${r.p99Ms} ms non-2xx ${r.non2xx}`);
      return r;
    };
    const row = (label: string, r: WrkResult | undefined, status: string) => ({
      label,
      values: {
        rps: r?.rps,
        p50: r?.p50Ms,
        p99: r?.p99Ms,
        non2xx: r ? r.non2xx + r.socketErrors : undefined,
        status,
      },
    });
    const plainHeaders = { 'content-type': 'application/json' };

    const nginx = await startNginx(1);
    try {
      rows.push(
        row(
          'nginx return 202',
          await measure('nginx', `http://127.0.0.1:${nginx.port}/ingest/x`, plainHeaders),
          'ok',
        ),
      );
    } finally {
      await nginx.close();
    }

    const node = forkTs(new URL('../lib/node202-server.ts', import.meta.url));
    try {
      const port = await new Promise<number>((res) =>
        node.child.once('message', (m: { port: number }) => res(m.port)),
      );
      rows.push(
        row('node:http 202', await measure('node', `http://127.0.0.1:${port}/ingest/x`, plainHeaders), 'ok'),
      );
    } finally {
      await node.stop();
    }

    // The backends alone (raw ack: read the body, 202), so the pipeline's cost can be told apart
    // from the socket layer's.
    for (const backend of ['node', 'uring'] as const) {
      const ack = forkTs(new URL('../lib/ack-server.ts', import.meta.url), [backend]);
      const label = `${backend} backend, raw ack`;
      try {
        const m = await new Promise<{ port: number; backend: string }>((res) =>
          ack.child.once('message', (x: { port: number; backend: string }) => res(x)),
        );
        const r = await measure(label, `http://127.0.0.1:${m.port}/ingest/x`, plainHeaders);
        rows.push(row(label, r, m.backend === backend ? 'ok' : `ran as ${m.backend}`));
      } catch (err) {
        rows.push(row(label, undefined, 'failed to start'));
        notes.push(`${label}: ${(err as Error).message.split('\n')[0]}`);
      } finally {
        await ack.stop();
      }
    }

    for (const backend of ['node', 'uring'] as const) {
      const label = `Spillway ingest (${backend})`;
      const c = new SpillwayCluster('bi');
      try {
        await c.tenant('acme');
        const src = await c.githubSource('acme', `gh-${backend}`);
        const r = await c.startRole('ingest', { SPILLWAY_INGEST_BACKEND: backend });
        if (r.ingestPort === undefined) {
          rows.push(row(label, undefined, 'no ingest port'));
          notes.push(`${label}: the ingest role did not open an ingest port (role not implemented yet).`);
          continue;
        }
        const probe = await postGithub(r.ingestPort, src, `${runTag}-probe`, BODY).catch((e) => String(e));
        if (probe !== 202) {
          rows.push(row(label, undefined, `probe ${probe}`));
          notes.push(`${label}: a signed probe got ${probe}, not 202; not measured.`);
          continue;
        }
        const metrics = await c.metrics(r).catch(() => '');
        const seen =
          /backend="(node|uring)"/.exec(metrics)?.[1] ??
          /backend[=:"\s]+(node|uring)/.exec(r.proc.out() + r.proc.err())?.[1];
        if (seen && seen !== backend)
          notes.push(`${label}: the process reports backend ${seen} (fell back).`);
        const headers = {
          'content-type': 'application/json',
          'x-github-event': 'push',
          'x-hub-signature-256': signGithub(src.secret, BODY),
        };
        const res = await measure(
          label,
          `http://127.0.0.1:${r.ingestPort}/ingest/${src.id}`,
          headers,
          'x-github-delivery',
        );
        // Proof that the 202s were durable, not a stub: every acknowledged delivery id has its dedup
        // marker in Redis (written with its batch). Counts warm-up + probe + measured run.
        const markers = await countKeys(c, `${c.prefix}:{t:acme}:dedup:*`);
        const acked = acknowledged + 1 + res.requests - res.non2xx;
        const durable = markers >= acked ? 'ok, durable' : `only ${markers}/${acked} durable`;
        rows.push(row(label, res, seen && seen !== backend ? `ran as ${seen}` : durable));
        if (markers < acked)
          notes.push(`${label}: ${acked} requests acknowledged but only ${markers} dedup markers in Redis.`);
        if (res.non2xx > 0)
          notes.push(`${label}: ${res.non2xx} responses were not 2xx (429/503 under load count here).`);
      } catch (err) {
        rows.push(row(label, undefined, 'failed to start'));
        notes.push(`${label}: ${(err as Error).message.split('\n')[0]}`);
      } finally {
        await c.close();
      }
    }

    const redisAof = await (async () => {
      const c = new SpillwayCluster('bi');
      try {
        const [, aof] = (await c.redis.config('GET', 'appendonly')) as string[];
        const [, fsync] = (await c.redis.config('GET', 'appendfsync')) as string[];
        return `appendonly ${aof}, appendfsync ${fsync}`;
      } finally {
        await c.close({ keepData: true });
      }
    })().catch(() => 'unknown');
    notes.push(
      `Redis under test: ${redisAof}. "durable" = every acknowledged delivery id has its dedup marker in Redis after the run.`,
    );
    const by = (l: string) => rows.find((x) => x.label.startsWith(l))?.values.rps as number | undefined;
    const nginxRps = by('nginx');
    for (const x of rows)
      x.values.vsNginx = nginxRps && typeof x.values.rps === 'number' ? x.values.rps / nginxRps : undefined;
    const spwNode = by('Spillway ingest (node)');
    const spwUring = by('Spillway ingest (uring)');
    const ackNode = by('node backend, raw ack');
    const ackUring = by('uring backend, raw ack');
    const goals: Goal[] = [
      {
        what: 'Spillway (node) ÷ nginx req/s',
        target: '≥ 0.50',
        measured: spwNode && nginxRps ? spwNode / nginxRps : undefined,
        pass: spwNode && nginxRps ? spwNode / nginxRps >= 0.5 : undefined,
      },
      {
        what: 'uring ÷ node req/s (full pipeline)',
        target: '≥ 1.5',
        measured: spwNode && spwUring ? spwUring / spwNode : undefined,
        pass: spwNode && spwUring ? spwUring / spwNode >= 1.5 : undefined,
      },
      {
        what: 'uring ÷ node req/s (raw ack, backends alone)',
        target: '≥ 1.5',
        measured: ackNode && ackUring ? ackUring / ackNode : undefined,
        pass: ackNode && ackUring ? ackUring / ackNode >= 1.5 : undefined,
      },
    ];
    return {
      status: spwNode && spwUring ? 'ok' : 'partial',
      columns: [
        { key: 'rps', header: 'req/s' },
        { key: 'p50', header: 'p50 ms', digits: 2 },
        { key: 'p99', header: 'p99 ms', digits: 2 },
        { key: 'non2xx', header: 'non-2xx' },
        { key: 'vsNginx', header: '÷ nginx', digits: 2 },
        { key: 'status', header: 'status' },
      ],
      rows,
      goals,
      notes,
      chart: { key: 'rps', unit: 'req/s (higher is better)' },
    };
  },
};

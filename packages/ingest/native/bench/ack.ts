/**
 * Backend-only comparison (not the repository benchmark, which lives in test/bench): the uring and
 * node:http IngestServers with an ack handler (read the body, answer 202) under wrk, interleaved.
 *   node packages/ingest/native/bench/ack.ts [seconds=5] [connections=64] [rounds=2]
 * Needs wrk on PATH. Prints one line per run and a summary.
 */
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createNodeServer } from '../../src/backends/node.ts';
import { createUringServer } from '../../src/backends/uring.ts';
import type { IngestHandler, IngestServer } from '../../src/server.ts';

const secs = Number(process.argv[2] ?? 5);
const conns = Number(process.argv[3] ?? 64);
const rounds = Number(process.argv[4] ?? 2);

const handler: IngestHandler = {
  begin() {
    let n = 0;
    return {
      accept: {
        maxBodyBytes: 1 << 20,
        write(c) {
          n += c.length;
        },
        async end() {
          return { status: 202, body: { id: 'evt_1', n } };
        },
        abort() {},
      },
    };
  },
};

const lua = join(tmpdir(), 'spw-ack.lua');
writeFileSync(
  lua,
  `wrk.method = "POST"\nwrk.body = string.rep("a", 1024)\nwrk.headers["Content-Type"] = "application/json"\n`,
);

async function run(name: 'uring' | 'node'): Promise<{ rps: number; p99: string }> {
  const opts = { handler, host: '127.0.0.1', port: 0 };
  const srv: IngestServer = name === 'uring' ? createUringServer(opts) : createNodeServer(opts);
  const { port } = await srv.listen();
  // wrk runs in a child while this event loop serves: spawnSync would block it.
  const out = await new Promise<string>((resolve) => {
    const p = spawn('wrk', [
      '-t1',
      `-c${conns}`,
      `-d${secs}s`,
      '--latency',
      '-s',
      lua,
      `http://127.0.0.1:${port}/ingest/x`,
    ]);
    let s = '';
    p.stdout.on('data', (d) => (s += d));
    p.on('close', () => resolve(s));
  });
  await srv.close();
  const rps = Number(/Requests\/sec:\s+([\d.]+)/.exec(out)?.[1] ?? 0);
  const p99 = /99%\s+(\S+)/.exec(out)?.[1] ?? '?';
  return { rps, p99 };
}

const res: Record<string, number[]> = { uring: [], node: [] };
for (let r = 0; r < rounds; r++) {
  for (const b of ['uring', 'node'] as const) {
    const { rps, p99 } = await run(b);
    res[b]!.push(rps);
    console.log(`${b.padEnd(5)} round ${r + 1}: ${rps.toFixed(0)} req/s, p99 ${p99}`);
  }
}
const avg = (a: number[]) => a.reduce((x, y) => x + y, 0) / a.length;
console.log(
  `mean: uring ${avg(res.uring!).toFixed(0)} req/s, node ${avg(res.node!).toFixed(0)} req/s, ratio ${(avg(res.uring!) / avg(res.node!)).toFixed(2)}`,
);
process.exit(0);

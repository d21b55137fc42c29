import { readdirSync, readFileSync } from 'node:fs';
import { createKeys } from '@spillway/shared';
import { Queue } from 'bullmq';
import { sleep, waitFor } from '../helpers/wait.ts';
import { rssOf } from './lib/procs.ts';
import { startSink } from './lib/sink.ts';
import { openIntake, SpillwayCluster } from './lib/spillway.ts';

const N = Number(process.argv[2] ?? 60000);
const sink = await startSink();
const c = new SpillwayCluster('bm');
await c.tenant('big', { maxInFlight: 1000, concurrency: 64 });
await c.endpoint('big', 'ok', sink.url('ok', 'big'));
const w = await c.startRole('worker', {
  NODE_OPTIONS: `--heapsnapshot-signal=SIGUSR2 --diagnostic-dir=/tmp/memprobe ${process.env.PROBE_FLAGS ?? ''}`,
});
await sleep(1500);
await c.store.updateTenant('big', (t) => ({ ...t, status: 'paused' }));
await sleep(1200);
const f = await openIntake(c);
const keys = createKeys(c.prefix);
const q = new Queue(keys.intakeQueue, { connection: c.redis as never, prefix: keys.bullPrefix });
const t0 = Date.now();
for (let i = 0; i < N; i += 2000) {
  const jobs: Promise<unknown>[] = [];
  for (let j = i; j < Math.min(N, i + 2000); j++) jobs.push(f.submit('big', 128));
  await Promise.all(jobs);
}
console.log('enqueued', (Date.now() - t0) / 1000);
const rssMax = { v: 0 };
const tick = setInterval(async () => {
  rssMax.v = Math.max(rssMax.v, (await rssOf(w.proc.pid)) ?? 0);
  if (w.proc.child.exitCode !== null) {
    console.log('WORKER EXITED', w.proc.child.exitCode, w.proc.err().slice(-2000));
    process.exit(1);
  }
}, 250);
await waitFor(
  async () => {
    const counts = await q.getJobCounts('waiting', 'active', 'delayed', 'prioritized', 'paused');
    return Object.values(counts).every((v) => v === 0);
  },
  'queue empty',
  300_000,
  500,
);
console.log(
  'spilled',
  (Date.now() - t0) / 1000,
  'rss',
  ((await rssOf(w.proc.pid)) ?? 0) / 2 ** 20,
  'rss max',
  rssMax.v / 2 ** 20,
);
clearInterval(tick);
await sleep(3000);
process.kill(w.proc.pid, 'SIGUSR2');
await sleep(8000);
console.log('rss', ((await rssOf(w.proc.pid)) ?? 0) / 2 ** 20);
await f.close();
await q.close();
await c.close();
await sink.close();
const file = readdirSync('/tmp/memprobe')
  .filter((x) => x.endsWith('.heapsnapshot'))
  .sort()
  .at(-1)!;
const snap = JSON.parse(readFileSync(`/tmp/memprobe/${file}`, 'utf8'));
const f_ = snap.snapshot.meta.node_fields as string[];
const types = snap.snapshot.meta.node_types[0] as string[];
const nf = f_.length;
const iType = f_.indexOf('type');
const iName = f_.indexOf('name');
const iSize = f_.indexOf('self_size');
const agg = new Map<string, [number, number]>();
const nodes = snap.nodes as number[];
let total = 0;
for (let i = 0; i < nodes.length; i += nf) {
  const key = `${types[nodes[i + iType]!]}:${snap.strings[nodes[i + iName]!].slice(0, 60)}`;
  const a = agg.get(key) ?? [0, 0];
  a[0] += nodes[i + iSize]!;
  a[1]++;
  agg.set(key, a);
  total += nodes[i + iSize]!;
}
console.log('snapshot total MiB', (total / 2 ** 20).toFixed(1));
for (const [k, [sz, n]] of [...agg].sort((a, b) => b[1][0] - a[1][0]).slice(0, 25))
  console.log((sz / 2 ** 20).toFixed(1).padStart(7), String(n).padStart(8), k);
process.exit(0);

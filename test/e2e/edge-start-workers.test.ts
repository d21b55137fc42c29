/**
 * `spillway start --role ingest` with SPILLWAY_INGEST_WORKERS=2 (docs/edge.md, "Ingest workers"):
 * two ingest processes under a supervisor, each with its own SO_REUSEPORT socket on the one port.
 * Requests on fresh connections reach both (each worker's own /metrics counts what it served); a
 * worker killed with SIGKILL leaves the other answering 202 and is restarted. With SPILLWAY_EDGE=on
 * (root, a private bpffs): the steering program is attached over the two workers and XDP on a veth
 * whose peer lives in a namespace of this test; with a device that does not exist, start says in
 * one line what did not attach and serves anyway.
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import http from 'node:http';
import { edgeStatus } from '@spillway/ingest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildBpf, LOADER, ownedId, run, skipBpf } from '../../bpf/test/harness.ts';
import { freePort } from '../conformance/support.ts';
import { testEnv } from '../helpers/env.ts';
import { githubHeaders } from '../helpers/github.ts';
import { seedGithubSource } from '../helpers/github-source.ts';
import { alive, type Spawned, spawnSpillway } from '../helpers/spawn.ts';
import { waitFor } from '../helpers/wait.ts';

/** Every worker banner in the supervisor's output: its pid and its own admin port. */
const workers = (p: Spawned) =>
  [...p.stdout().matchAll(/spillway ingest running \(pid (\d+)\)\n {2}admin: +http:\/\/[^:]+:(\d+)/g)]
    .map((m) => ({ pid: Number(m[1]), adminPort: Number(m[2]) }))
    .filter((w) => w.pid !== p.child.pid);

/** One signed delivery on a fresh connection (so the kernel picks a socket each time). */
async function post(port: number, sourceId: string): Promise<number | string> {
  const body = `{"r":"${randomBytes(4).toString('hex')}"}`;
  const headers = {
    ...(await githubHeaders('sec', body, `d-${randomBytes(8).toString('hex')}`)),
    'content-length': String(Buffer.byteLength(body)),
    connection: 'close',
  };
  return new Promise((resolve) => {
    const req = http.request(
      { host: '127.0.0.1', port, path: `/ingest/${sourceId}`, method: 'POST', headers, agent: false },
      (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
      },
    );
    req.setTimeout(10_000, () => req.destroy(new Error('timeout')));
    req.on('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? err.message));
    req.end(body);
  });
}

/** Requests a worker has answered, from its own /metrics. */
async function served(adminPort: number): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${adminPort}/metrics`)).text();
  return [...text.matchAll(/^spillway_ingest_requests_total(?:\{[^}]*\})? (\d+)/gm)].reduce(
    (sum, m) => sum + Number(m[1]),
    0,
  );
}

const procs: Spawned[] = [];
async function startWorkers(extra: Record<string, string>) {
  const ingestPort = await freePort();
  const env = testEnv({
    SPILLWAY_INGEST_PORT: String(ingestPort),
    SPILLWAY_INGEST_WORKERS: '2',
    SPILLWAY_INGEST_BACKEND: 'node',
    SPILLWAY_LOG_LEVEL: 'warn',
    ...extra,
  });
  const p = spawnSpillway(['start', '--role', 'ingest'], env);
  procs.push(p);
  await waitFor(
    () => /ingest workers: 2 processes/.test(p.stdout()) || p.child.exitCode !== null,
    'the supervisor and its two workers to start',
    90_000,
  );
  expect(p.child.exitCode, p.stderr()).toBeNull();
  return { p, env, ingestPort };
}

/** Stops every supervisor started so far; each must take its workers with it. */
async function stopAll() {
  const left: number[] = [];
  for (const p of procs.splice(0)) {
    const pids = workers(p).map((w) => w.pid);
    p.child.kill('SIGTERM');
    await p.exited;
    await waitFor(() => !pids.some(alive), 'the workers to exit', 15_000).catch(() => {});
    left.push(...pids.filter(alive));
  }
  // One that outlived its supervisor is a bug, but must not be left running.
  for (const pid of left) process.kill(pid, 'SIGKILL');
  expect(left).toEqual([]);
}

describe('SPILLWAY_INGEST_WORKERS=2', () => {
  afterAll(stopAll);

  it('two ingest processes serve the port; one killed, the other keeps answering 202 and it is restarted', async () => {
    const { p, env, ingestPort } = await startWorkers({});
    const { sourceId, redis } = await seedGithubSource(env);
    try {
      const [a, b] = workers(p);
      expect(a && b && a.pid !== b.pid).toBe(true);
      const statuses: (number | string)[] = [];
      for (let i = 0; i < 60; i++) statuses.push(await post(ingestPort, sourceId));
      expect(statuses.filter((s) => s !== 202)).toEqual([]);
      const counts = [await served(a!.adminPort), await served(b!.adminPort)];
      console.log(
        `60 requests on fresh connections: worker ${a!.pid} served ${counts[0]}, ${b!.pid} ${counts[1]}`,
      );
      expect(counts.every((c) => c > 0)).toBe(true);

      // SIGKILL one worker: its socket leaves the group, the other takes every new connection.
      process.kill(a!.pid, 'SIGKILL');
      // (Connections already queued on its socket are reset with it: the kernel's doing, and why
      // handovers pass the socket on rather than close it.)
      await waitFor(() => !alive(a!.pid), 'the killed worker to be gone', 10_000, 20);
      const during: (number | string)[] = [];
      for (let i = 0; i < 30; i++) during.push(await post(ingestPort, sourceId));
      expect(during.filter((s) => s !== 202)).toEqual([]);
      await waitFor(() => workers(p).length === 3, 'the killed worker to be restarted', 60_000);
      const c = workers(p)[2]!;
      expect(alive(c.pid)).toBe(true);
      expect([a!.pid, b!.pid]).not.toContain(c.pid);
      expect(p.stdout()).toMatch(/ingest workers: 2 processes/);
      // The restarted worker takes its share again.
      for (let i = 0; i < 60; i++) expect(await post(ingestPort, sourceId)).toBe(202);
      expect(await served(c.adminPort)).toBeGreaterThan(0);
    } finally {
      redis.disconnect();
    }
  }, 240_000);

  it('SIGUSR2 to the supervisor hands each worker over in turn under load: 0 errors, 0 non-202', async () => {
    const { p, env, ingestPort } = await startWorkers({});
    const { sourceId, redis } = await seedGithubSource(env);
    try {
      const before = workers(p).map((w) => w.pid);
      const statuses: (number | string)[] = [];
      let loading = true;
      // Four clients, each a fresh connection per request, through the whole handover.
      const load = Promise.all(
        Array.from({ length: 4 }, async () => {
          while (loading) statuses.push(await post(ingestPort, sourceId));
        }),
      );
      await new Promise((r) => setTimeout(r, 500));
      process.kill(p.child.pid!, 'SIGUSR2');
      await waitFor(() => workers(p).length === 4, 'both workers to be handed over', 120_000, 50);
      await waitFor(() => !before.some(alive), 'the old workers to drain and exit', 30_000, 50);
      await new Promise((r) => setTimeout(r, 500));
      loading = false;
      await load;
      const after = workers(p)
        .slice(2)
        .map((w) => w.pid);
      console.log(`handover ${before.join(',')} → ${after.join(',')}: ${statuses.length} requests`);
      expect(after.every(alive)).toBe(true);
      expect(statuses.filter((s) => s !== 202)).toEqual([]);
      expect(statuses.length).toBeGreaterThan(20);
      // The successors are the supervisor's slots now: one killed is restarted like any worker.
      process.kill(after[0]!, 'SIGKILL');
      await waitFor(() => workers(p).length === 5, 'the killed successor to be restarted', 60_000);
    } finally {
      redis.disconnect();
    }
  }, 300_000);

  it('a bad SPILLWAY_INGEST_WORKERS stops start with one line naming it', async () => {
    for (const bad of ['0', '17', 'two']) {
      const p = spawnSpillway(['start', '--role', 'ingest'], testEnv({ SPILLWAY_INGEST_WORKERS: bad }));
      expect(await p.exited).toBe(1);
      expect(p.stderr().trim().split('\n')).toHaveLength(1);
      expect(p.stderr()).toMatch(/^spillway: SPILLWAY_INGEST_WORKERS must be a whole number from 1 to 16/);
    }
    const p = spawnSpillway(['start', '--role', 'ingest'], testEnv({ SPILLWAY_INGEST_WORKERS: '2' }));
    expect(await p.exited).toBe(1);
    expect(p.stderr()).toMatch(
      /^spillway: SPILLWAY_INGEST_WORKERS above 1 needs a fixed SPILLWAY_INGEST_PORT/,
    );
  }, 60_000);
});

describe.skipIf(skipBpf)('SPILLWAY_INGEST_WORKERS=2 with SPILLWAY_EDGE=on (root)', () => {
  const id = ownedId();
  const BPFFS = `/run/spw-bpf-sw-${id}`;
  const PIN = `${BPFFS}/pins`;
  const NS = `spw-sw-${id}`;
  // The veth end XDP attaches to stays here; its peer is in the test's namespace, so nothing but
  // this test's traffic crosses it.
  const DEV = `sw${id}`.slice(0, 15);
  beforeAll(() => {
    buildBpf();
    execFileSync('mkdir', ['-p', BPFFS]);
    execFileSync('mount', ['-t', 'bpf', 'bpf', BPFFS]);
    execFileSync('ip', ['netns', 'add', NS]);
    execFileSync('ip', ['link', 'add', DEV, 'type', 'veth', 'peer', 'name', 'p0', 'netns', NS]);
    execFileSync('ip', ['link', 'set', DEV, 'up']);
  });
  afterAll(async () => {
    // The supervisors first: they detach steering.
    await stopAll();
    run(LOADER, ['--pin-root', PIN, 'detach', '--purge']);
    run('ip', ['link', 'del', DEV]);
    run('ip', ['netns', 'del', NS]);
    run('umount', [BPFFS]);
    run('rmdir', [BPFFS]);
  });

  it('start attaches XDP on the device and steers across both workers; `spillway edge status` shows it', async () => {
    const { p } = await startWorkers({
      SPILLWAY_EDGE: 'on',
      SPILLWAY_EDGE_DEVICES: DEV,
      SPILLWAY_BPF_PIN_ROOT: PIN,
    });
    const lines = p
      .stdout()
      .split('\n')
      .filter((l) => l.includes('edge:'));
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(
      new RegExp(
        `^ {2}edge: XDP on ${DEV}, mode monitor; .*; SK_REUSEPORT steering across 2 ingest workers$`,
      ),
    );
    const st = spawnSpillway(['edge', 'status', '--pin-root', PIN], testEnv());
    expect(await st.exited, st.stderr()).toBe(0);
    const status = JSON.parse(st.stdout());
    expect(status.attached.xdp).toContain(DEV);
    expect(status.steer).toMatchObject({ enabled: true, workers: 2 });
    const pids = workers(p).map((w) => w.pid);
    const r = await edgeStatus({ pinRoot: PIN });
    expect(r.available && r.status.steer?.workersDetail.length).toBe(2);
    expect(pids).toHaveLength(2);

    // Stopped, the supervisor detaches steering (XDP stays pinned: it outlives restarts).
    p.child.kill('SIGTERM');
    await p.exited;
    const after = await edgeStatus({ pinRoot: PIN });
    expect(after.available && after.status.steer?.enabled).toBe(false);
    expect(after.available && after.status.attached.xdp).toContain(DEV);
  }, 240_000);

  it('a device that does not exist: one line says what did not attach, and ingest serves', async () => {
    const { p, env, ingestPort } = await startWorkers({
      SPILLWAY_EDGE: 'on',
      SPILLWAY_EDGE_DEVICES: 'spwnodev0',
      SPILLWAY_BPF_PIN_ROOT: PIN,
    });
    const lines = p
      .stdout()
      .split('\n')
      .filter((l) => l.includes('edge:'));
    expect(lines).toHaveLength(1);
    console.log(lines[0]);
    expect(lines[0]).toMatch(/edge: XDP and drop tracer not attached \(.*spwnodev0.*\); /);
    const { sourceId, redis } = await seedGithubSource(env);
    try {
      for (let i = 0; i < 10; i++) expect(await post(ingestPort, sourceId)).toBe(202);
    } finally {
      redis.disconnect();
    }
  }, 240_000);
});

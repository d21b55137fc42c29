/**
 * The allowlist that keeps itself current, against the real pinned XDP maps (root, a private
 * bpffs), and `spillway start` with SPILLWAY_EDGE=on: the ingest role attaches the edge, loads a
 * provider's ranges from a local HTTP server joined with a source's allowCidrs, swaps a new
 * generation in when the served ranges change; without the capabilities it says why in one line
 * of its start banner and serves without the edge.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createAllowlistRefresher, edgeStatus, loadAllowRanges } from '@spillway/ingest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildBpf, LOADER, ownedId, run, skipBpf } from '../../bpf/test/harness.ts';
import { freePort } from '../conformance/support.ts';
import { testEnv } from '../helpers/env.ts';
import { seedGithubSource } from '../helpers/github-source.ts';
import { type Spawned, spawnSpillway } from '../helpers/spawn.ts';
import { waitFor } from '../helpers/wait.ts';

const id = ownedId();
const BPFFS = `/run/spw-bpf-allow-${id}`;
const PIN = `${BPFFS}/pins`;

let served = JSON.stringify({ hooks: ['192.30.252.0/22'] });
let status = 200;
let server: http.Server;
let metaUrl: string;

const xdp = async () => {
  const r = await edgeStatus({ pinRoot: PIN });
  if (!r.available) throw new Error(r.reason);
  return r.status.xdp!;
};

describe.skipIf(skipBpf)('allowlist refresher on the real XDP maps', () => {
  let tmp: string;
  const procs: Spawned[] = [];
  beforeAll(async () => {
    buildBpf();
    tmp = mkdtempSync(join(tmpdir(), 'spw-edge-allow-'));
    execFileSync('mkdir', ['-p', BPFFS]);
    execFileSync('mount', ['-t', 'bpf', 'bpf', BPFFS]);
    server = http.createServer((_req, res) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(served);
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    metaUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}/meta`;
  });
  afterAll(async () => {
    for (const p of procs) {
      p.child.kill('SIGTERM');
      await p.exited;
    }
    await new Promise((r) => server.close(r));
    run(LOADER, ['--pin-root', PIN, 'detach', '--purge']);
    run('umount', [BPFFS]);
    run('rmdir', [BPFFS]);
    rmSync(tmp, { recursive: true, force: true });
  });

  it('swaps whole generations into the pinned maps; a failed fetch leaves the one in force', async () => {
    const att = run(LOADER, [
      '--pin-root',
      PIN,
      'attach',
      '--port',
      '18399',
      '--mode',
      'monitor',
      '--no-trace',
    ]);
    expect(att.code, att.stderr).toBe(0);
    served = JSON.stringify({ hooks: ['192.30.252.0/22', '2620:112:3000::/44'] });
    let n = 0;
    const r = createAllowlistRefresher({
      ranges: [metaUrl],
      intervalMs: 3_600_000,
      sourceCidrs: async () => ['10.9.0.0/16'],
      apply: async (cidrs) => {
        const file = join(tmp, `allow-${n++}.txt`);
        writeFileSync(file, `${cidrs.join('\n')}\n`);
        const res = await loadAllowRanges(file, { pinRoot: PIN });
        return res.available ? { ok: true } : { ok: false, reason: res.reason };
      },
    });
    expect((await r.refresh()).outcome).toBe('ok');
    const g1 = await xdp();
    expect(g1).toMatchObject({ allow: 3, block: 0 });
    served = JSON.stringify({ hooks: ['192.30.252.0/22', '2620:112:3000::/44', '185.199.108.0/22'] });
    expect((await r.refresh()).swapped).toBe(true);
    const g2 = await xdp();
    expect(g2.allow).toBe(4);
    expect(g2.generation).not.toBe(g1.generation);
    status = 500;
    expect((await r.refresh()).outcome).toBe('stale');
    expect(await xdp()).toMatchObject({ generation: g2.generation, allow: 4 });
    status = 200;
  });

  async function ingestWithEdge(extra: Record<string, string>, noCaps = false) {
    const env = testEnv({
      SPILLWAY_INGEST_PORT: String(await freePort()),
      SPILLWAY_EDGE: 'on',
      SPILLWAY_EDGE_RANGES: metaUrl,
      SPILLWAY_EDGE_RANGES_INTERVAL: '1s',
      SPILLWAY_BPF_PIN_ROOT: PIN,
      SPILLWAY_LOG_LEVEL: 'warn',
      ...extra,
    });
    const args = ['start', '--role', 'ingest'];
    const p = noCaps
      ? spawnSpillway(args, env, {
          wrap: ['setpriv', '--inh-caps=-all', '--ambient-caps=-all', '--bounding-set=-all', '--'],
        })
      : spawnSpillway(args, env);
    procs.push(p);
    await waitFor(() => /running/.test(p.stdout()) || p.child.exitCode !== null, 'ingest to start', 30_000);
    return { p, env };
  }

  it('spillway start with SPILLWAY_EDGE=on loads the ranges and the sources allowCidrs, and follows both', async () => {
    served = JSON.stringify({ hooks: ['192.30.252.0/22'] });
    const { p, env } = await ingestWithEdge({});
    expect(p.stdout()).toMatch(/\n {2}edge: drop tracer only \(no SPILLWAY_EDGE_DEVICES\), mode monitor/);
    await waitFor(async () => (await xdp()).allow === 1, 'the provider range in the maps', 10_000, 100);
    // A source with allowCidrs: in the maps without a restart.
    const { redis } = await seedGithubSource(env, { allowCidrs: ['10.20.0.0/16', '10.21.0.0/16'] });
    try {
      await waitFor(async () => (await xdp()).allow === 3, 'the source ranges in the maps', 10_000, 100);
      // The provider publishes another range: picked up on the next interval.
      served = JSON.stringify({ hooks: ['192.30.252.0/22', '140.82.112.0/20'] });
      await waitFor(async () => (await xdp()).allow === 4, 'the new provider range', 10_000, 100);
    } finally {
      redis.disconnect();
    }
  });

  it('without the capabilities: one line why, and ingest serves without the edge', async () => {
    const port = String(await freePort());
    const { p } = await ingestWithEdge({ SPILLWAY_ADMIN_PORT: port }, true);
    expect(p.child.exitCode).toBeNull();
    const lines = p
      .stdout()
      .split('\n')
      .filter((l) => l.includes('edge:'));
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/edge: not attached \(.+\); running without it/);
    expect((await fetch(`http://127.0.0.1:${port}/healthz`)).status).toBe(200);
  });
});

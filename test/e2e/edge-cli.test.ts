import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BPF_DIR, buildBpf, LOADER, ownedId, run, skipBpf } from '../../bpf/test/harness.ts';

// `spillway edge ...` as an operator runs it: the real CLI in a subprocess, against a network
// namespace of its own (one end of a veth pair takes the XDP program) and a private bpffs.
const id = ownedId(); // carries our pid: a later run sweeps what a killed one left
const NS = `spw-cli-${id}`;
const DEV = 'spwcli0';
const BPFFS = `/run/spw-bpf-cli-${id}`;
const PIN = `${BPFFS}/pins`;
const PORT = 18383;
const CLI = resolve(import.meta.dirname, '../../packages/router/bin/spillway.mjs');
const fixture = (f: string) => join(BPF_DIR, 'test/fixtures', f);

function spillway(args: string[], opts: { env?: Record<string, string>; noCaps?: boolean } = {}) {
  const argv = [process.execPath, CLI, 'edge', ...args];
  // Root without capabilities (uid 0 keeps reading the checkout, which may be mode 0700 in CI;
  // an empty bounding set means no CAP_BPF/CAP_NET_ADMIN/CAP_PERFMON after exec).
  const [cmd, rest] = opts.noCaps
    ? ['setpriv', ['--inh-caps=-all', '--ambient-caps=-all', '--bounding-set=-all', '--', ...argv]]
    : [argv[0]!, argv.slice(1)];
  try {
    const stdout = execFileSync(cmd, rest, {
      encoding: 'utf8',
      env: { ...process.env, ...opts.env },
      stdio: ['ignore', 'pipe', 'pipe'],
      timeout: 15_000,
    });
    return { code: 0, stdout, stderr: '' };
  } catch (e) {
    const err = e as { status?: number; stdout?: string; stderr?: string };
    return { code: err.status ?? -1, stdout: err.stdout ?? '', stderr: err.stderr ?? String(e) };
  }
}
const ok = (args: string[]) => {
  const r = spillway([...args, '--pin-root', PIN, '--netns', NS]);
  expect(r.code, r.stderr).toBe(0);
  return JSON.parse(r.stdout);
};
const xdpOnDev = () =>
  execFileSync('ip', ['-n', NS, 'link', 'show', DEV], { encoding: 'utf8' }).includes('xdpgeneric');

describe.skipIf(skipBpf)('spillway edge CLI (subprocess)', () => {
  let tmp: string;

  beforeAll(() => {
    buildBpf();
    tmp = mkdtempSync(join(tmpdir(), 'spw-edge-cli-'));
    execFileSync('mkdir', ['-p', BPFFS]);
    execFileSync('mount', ['-t', 'bpf', 'bpf', BPFFS]);
    execFileSync('ip', ['netns', 'add', NS]);
    // a veth pair inside the namespace (no dummy driver on every kernel): XDP goes on one end
    execFileSync('ip', ['-n', NS, 'link', 'add', DEV, 'type', 'veth', 'peer', 'name', `${DEV}p`]);
    execFileSync('ip', ['-n', NS, 'link', 'set', DEV, 'up']);
  });

  afterAll(() => {
    run('ip', ['netns', 'exec', NS, LOADER, '--pin-root', PIN, 'detach', '--purge']);
    run('ip', ['netns', 'del', NS]);
    run('umount', [BPFFS]);
    run('rmdir', [BPFFS]);
    rmSync(tmp, { recursive: true, force: true });
  });

  it('attach, allow (atomic swap, a bad file swaps nothing), mode, status, detach --purge', () => {
    const att = ok([
      'attach',
      '--dev',
      DEV,
      '--port',
      String(PORT),
      '--mode',
      'monitor',
      '--xdp-mode',
      'skb',
    ]);
    expect(att.attached).toEqual({ xdp: [DEV], trace: true });
    expect(att.xdp).toMatchObject({ mode: 'monitor', port: PORT, allow: 0, block: 0 });
    expect(xdpOnDev()).toBe(true);

    // GitHub meta: 6 `hooks` ranges (the `web`/`api` ones are not webhook sources); Stripe: 12
    const loaded = ok([
      'allow',
      '--file',
      fixture('github_meta.json'),
      '--file',
      fixture('stripe_webhooks.json'),
      '--block',
      fixture('block.txt'),
    ]);
    expect(loaded).toMatchObject({ allow: 18, block: 2 });
    const st = ok(['status']);
    expect(st.xdp).toMatchObject({ generation: loaded.generation, allow: 18, block: 2, mode: 'monitor' });

    writeFileSync(join(tmp, 'bad.txt'), '192.0.2.0/24\nnot-a-cidr\n');
    const bad = spillway(['allow', '--file', join(tmp, 'bad.txt'), '--pin-root', PIN, '--netns', NS]);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/^spillway edge: .*bad\.txt/m);
    expect(ok(['status']).xdp).toMatchObject({ generation: loaded.generation, allow: 18, block: 2 });

    expect(ok(['mode', 'enforce'])).toEqual({ mode: 'enforce' });
    expect(ok(['status']).xdp.mode).toBe('enforce');

    const det = ok(['detach', '--purge']);
    expect(det.purged).toBe(true);
    expect(det.detached).toBeGreaterThanOrEqual(2); // the XDP link and the tracer's links
    expect(xdpOnDev()).toBe(false);
    expect(existsSync(PIN)).toBe(false); // pins and the pin directory are gone
    const after = ok(['status']);
    expect(after.attached).toEqual({ xdp: [], trace: false });
    expect(after.xdp).toBeNull();
  });

  it('without privileges or without the loader: exit 1 with one clear line', () => {
    const unprivileged = spillway(['status'], { noCaps: true });
    expect(unprivileged.code).toBe(1);
    expect(unprivileged.stderr).toMatch(/^spillway edge: .*not permitted/m);
    const missing = spillway(['status'], { env: { SPILLWAY_EDGE_LOADER: '/nonexistent/spillway-edge' } });
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/^spillway edge: loader not built/m);
    expect(missing.stdout).toBe('');
  });
});

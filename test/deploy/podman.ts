import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { waitFor } from '../helpers/wait.ts';

export const ROOT = fileURLToPath(new URL('../..', import.meta.url));
/** The podman configuration the image is built and run with (see deploy/image/containers.conf). */
export const CONTAINERS_CONF = `${ROOT}deploy/image/containers.conf`;

/** Runs a command; resolves with stdout, rejects with the command line and its stderr. */
export function run(
  cmd: string,
  args: string[],
  opts: { env?: Record<string, string>; timeoutMs?: number } = {},
): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(
      cmd,
      args,
      {
        cwd: ROOT,
        env: { ...process.env, CONTAINERS_CONF, ...opts.env },
        timeout: opts.timeoutMs ?? 60_000,
        maxBuffer: 64 << 20,
      },
      (err, stdout, stderr) => {
        if (err) reject(new Error(`${cmd} ${args.join(' ')} failed: ${err.message}\n${stderr.slice(-4000)}`));
        else resolve(stdout);
      },
    );
  });
}

export const podman = (args: string[], timeoutMs?: number) => run('podman', args, { timeoutMs });

/** Builds (or reuses) the image with deploy/image/build.sh; returns its reference. */
export async function buildImage(): Promise<string> {
  const out = await run('bash', ['deploy/image/build.sh'], { timeoutMs: 280_000 });
  const ref = out.trim().split('\n').at(-1) ?? '';
  if (!/^localhost\/spillway:[0-9a-f]{16}$/.test(ref))
    throw new Error(`build.sh printed no image reference: ${out}`);
  return ref;
}

export interface RoleContainer {
  name: string;
  role: string;
  adminPort: number;
  ingestPort?: number;
  /** Milliseconds from `podman run` to the first 200 from /readyz. */
  readyMs: number;
  logs(): Promise<string>;
  /** The container's main process as the host sees it (for uid checks). */
  hostPid(): Promise<number>;
}

/**
 * Starts one role of the image on the host network (ports 0: the role prints the ports it got), the
 * way the CI hosts can run it: runc, host ulimits. Resolves when /readyz answers 200.
 */
export async function runRole(
  ref: string,
  name: string,
  role: string,
  env: Record<string, string>,
): Promise<RoleContainer> {
  const t0 = performance.now();
  const envArgs = Object.entries(env).flatMap(([k, v]) => ['-e', `${k}=${v}`]);
  await podman([
    'run',
    '-d',
    '--name',
    name,
    '--runtime',
    'runc',
    '--network',
    'host',
    '--ulimit',
    'host',
    ...envArgs,
    ref,
    '--role',
    role,
  ]);
  const logs = async () => {
    // podman logs writes the container's stdout to stdout and its stderr to stderr: keep both.
    return new Promise<string>((resolve) => {
      execFile(
        'podman',
        ['logs', name],
        { env: { ...process.env, CONTAINERS_CONF }, maxBuffer: 64 << 20 },
        (_e, out, err) => resolve(`${out}${err}`),
      );
    });
  };
  const found = await waitFor(
    async () => {
      const text = await logs();
      const admin = /admin:\s+http:\/\/[\d.]+:(\d+)/.exec(text);
      if (!admin) {
        const state = (await podman(['inspect', '--format', '{{.State.Status}}', name])).trim();
        if (state === 'exited') throw new Error(`${role} container exited:\n${text}`);
        return undefined;
      }
      const ingest = /ingest:\s+http:\/\/[\d.]+:(\d+)/.exec(text);
      return { admin: Number(admin[1]), ingest: ingest ? Number(ingest[1]) : undefined };
    },
    `${role} container to print its ports`,
    60_000,
    100,
  );
  const ports = found!;
  await waitFor(
    async () =>
      (await fetch(`http://127.0.0.1:${ports.admin}/readyz`).catch(() => undefined))?.status === 200,
    `${role} /readyz`,
    60_000,
    50,
  );
  return {
    name,
    role,
    adminPort: ports.admin,
    ingestPort: ports.ingest,
    readyMs: performance.now() - t0,
    logs,
    async hostPid() {
      return Number((await podman(['inspect', '--format', '{{.State.Pid}}', name])).trim());
    },
  };
}

/** The real and effective uid of a host process, from /proc (`Uid:` real, effective, saved, fs). */
export function uidsOf(pid: number): number[] {
  const line = readFileSync(`/proc/${pid}/status`, 'utf8')
    .split('\n')
    .find((l) => l.startsWith('Uid:'));
  return (line ?? '').split(/\s+/).slice(1).map(Number);
}

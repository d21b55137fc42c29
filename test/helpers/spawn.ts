import { type ChildProcess, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

export const SPILLWAY_BIN = fileURLToPath(new URL('../../packages/router/bin/spillway.mjs', import.meta.url));

export interface Spawned {
  child: ChildProcess;
  stdout: () => string;
  stderr: () => string;
  exited: Promise<number | null>;
}

/**
 * Runs the real `spillway` CLI as a child process (same Node as the tests). `opts.stdin`: written to
 * its stdin, which is then closed (otherwise stdin is not connected). `opts.wrap`: a command to run
 * it under (e.g. `setpriv ... --`).
 */
export function spawnSpillway(
  args: string[],
  env: Record<string, string>,
  opts: { stdin?: string; wrap?: string[] } = {},
): Spawned {
  const argv = [...(opts.wrap ?? []), process.execPath, SPILLWAY_BIN, ...args];
  const child = spawn(argv[0]!, argv.slice(1), {
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/root', ...env },
    stdio: [opts.stdin === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'],
  });
  if (opts.stdin !== undefined) child.stdin?.end(opts.stdin);
  let out = '';
  let err = '';
  child.stdout?.on('data', (d) => {
    out += d;
  });
  child.stderr?.on('data', (d) => {
    err += d;
  });
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  return { child, stdout: () => out, stderr: () => err, exited };
}

/** Whether a process with this pid still exists. */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/**
 * Restarts that refuse no connection (docs/operations.md, "Restarts"). On SIGUSR2 a running
 * `spillway start --role ingest` starts its successor — the same command line, with the listening
 * sockets of the ingest and admin ports passed as fds 3 and 4 and a pipe on fd 5 — and waits for
 * it to write `ready` there (it is then accepting on those very sockets). Only then does it stop
 * accepting, answer what it holds (each answer only once its event is durable, every one with
 * `connection: close`), let idle keep-alive connections reach their timeout, and exit. The kernel's
 * accept queue belongs to the socket, not to a process: a SYN that arrives meanwhile waits in it
 * for whichever process accepts next, so none is refused and no request is cut.
 */
import { spawn } from 'node:child_process';
import { closeSync, writeSync } from 'node:fs';
import type { Readable } from 'node:stream';
import type { Logger } from '@spillway/shared';
import type { Role, Started } from './start.ts';

/**
 * Set in the environment of a worker of the ingest supervisor (roles/supervisor.ts) to the
 * supervisor's pid: the worker stops when that process is gone. Its successors inherit it.
 */
export const SUPERVISOR_ENV = 'SPILLWAY_INGEST_SUPERVISOR';

/** Fd numbers the successor finds its inheritance at. */
export const INHERITED_FDS = { ingest: 3, admin: 4, ready: 5 } as const;

export interface HandoverOptions {
  started: Started;
  role: Role;
  logger: Logger;
  /** How long the successor may take to say ready before the handover is given up. Default 60 s. */
  readyTimeoutMs?: number;
  /** Called once this process has handed over and closed: it should exit. */
  onHandedOver: () => void;
}

/** The successor side: tell the predecessor waiting on `fd` that this process is serving. */
export function signalReady(fd: number): void {
  try {
    writeSync(fd, 'ready\n');
  } finally {
    closeSync(fd);
  }
}

/**
 * Installs the SIGUSR2 handler; returns its removal. A handover already under way, or a role
 * without an ingest port, makes SIGUSR2 log one line and do nothing.
 */
export function installHandover(opts: HandoverOptions): () => void {
  const { started, role, logger } = opts;
  let busy = false;
  const onSignal = () => {
    if (busy) return void logger.warn('handover already under way; SIGUSR2 ignored');
    // SPILLWAY_INGEST_WORKERS above 1: the supervisor hands each worker over (roles/supervisor.ts).
    if (started.handover) {
      busy = true;
      void started.handover().finally(() => {
        busy = false;
      });
      return;
    }
    if (role !== 'ingest')
      return void logger.warn({ role }, 'SIGUSR2 hands over only `spillway start --role ingest`; ignored');
    const fds = started.listenFds();
    if (fds.ingest === undefined || fds.admin === undefined)
      return void logger.error({ fds }, 'handover: the listening sockets are not known; SIGUSR2 ignored');
    busy = true;
    const script = process.argv[1];
    if (!script) {
      busy = false;
      return void logger.error('handover: this process was not started from a script; SIGUSR2 ignored');
    }
    const args = [
      ...process.execArgv,
      script,
      'start',
      '--role',
      role,
      '--listen-fds',
      `${INHERITED_FDS.ingest},${INHERITED_FDS.admin}`,
      '--ready-fd',
      String(INHERITED_FDS.ready),
    ];
    // stdin, stdout and stderr are this process's: the successor logs where it logged.
    const child = spawn(process.execPath, args, {
      stdio: ['inherit', 'inherit', 'inherit', fds.ingest, fds.admin, 'pipe'],
      env: process.env,
    });
    const ready = (child.stdio as unknown as Readable[])[INHERITED_FDS.ready]!;
    let said = '';
    const timer = setTimeout(() => fail('not ready in time'), opts.readyTimeoutMs ?? 60_000);
    const cleanup = () => {
      clearTimeout(timer);
      ready.removeAllListeners('data');
      child.removeListener('exit', onExit);
      ready.destroy();
    };
    const fail = (why: string) => {
      cleanup();
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      busy = false;
      logger.error({ successor: child.pid, why }, 'handover failed; this process keeps serving');
    };
    const onExit = (code: number | null, signal: string | null) =>
      fail(`successor exited (${signal ?? code}) before it was ready`);
    child.once('exit', onExit);
    child.once('error', (err) => fail(err.message));
    ready.on('data', (d: Buffer) => {
      said += d.toString();
      if (!said.includes('ready')) return;
      cleanup();
      child.unref();
      logger.info({ successor: child.pid }, 'handover: successor is serving; draining and exiting');
      started.close({ drain: true }).then(opts.onHandedOver, (err: unknown) => {
        logger.error({ err }, 'handover: closing after the handover failed');
        opts.onHandedOver();
      });
    });
  };
  process.on('SIGUSR2', onSignal);
  return () => process.off('SIGUSR2', onSignal);
}

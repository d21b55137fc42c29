/**
 * SPILLWAY_INGEST_WORKERS=N above 1 (docs/edge.md, "Ingest workers"): the ingest role of `spillway
 * start` becomes a small supervisor of N ingest processes — each a `spillway start --role ingest`
 * of the same bin that binds its own SO_REUSEPORT socket on the ingest port (the reuseport group is
 * made of sockets, not processes: an inherited fd would be one socket shared, not N steered ones).
 *
 * A worker's slot is tracked by the pipe on its stdout, not by its pid: a SIGUSR2 handover
 * (roles/handover.ts) makes the worker's successor a grandchild that inherits that pipe and prints
 * its own `spillway ingest running (pid N)` on it, so the slot's pid follows the banner and the slot
 * is gone only when the pipe closes — when no process in it is left. A worker checks every second
 * that the supervisor (its pid in SPILLWAY_INGEST_SUPERVISOR) is alive and stops when it is gone
 * (even killed) rather than serve unsupervised. (Not a stdin pipe: node closes a child's stdin when
 * that child exits, which would stop its successor after a handover.)
 *
 * With SPILLWAY_EDGE=on the supervisor, not the workers, attaches the edge (XDP, drop tracer,
 * allowlist refresher: one refresher per host) and runs the loader's `steer` daemon over the group
 * once every worker listens; the daemon re-scans the listeners twice a second, so a restarted
 * worker's new socket joins the steering by itself.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { registerKernelDropMetrics, type SteeringHandle, startSteering } from '@spillway/ingest';
import { createRedis, errors, registry } from '@spillway/shared';
import { ConfigCache, ConfigStore } from '../config/store.ts';
import { type EdgeHandle, startEdge } from './edge.ts';
import { SUPERVISOR_ENV } from './handover.ts';
import type { RoleHandle } from './roles.ts';
import type { Runtime } from './runtime.ts';

const RUNNING = /^spillway ingest running \(pid (\d+)\)/;
/** How long a worker may take to print its banner, at start and after a SIGUSR2. */
const START_TIMEOUT_MS = 60_000;
/** A worker that dies within this of its start counts as failing: its restarts back off. */
const QUICK_DEATH_MS = 10_000;

interface Slot {
  readonly index: number;
  /** The process we spawned last for this slot (after a handover it may be gone, the slot not). */
  child?: ChildProcess;
  /** The process serving the slot now, from the last banner on its pipe. */
  pid?: number;
  startedAt: number;
  /** Quick deaths in a row: the restart delay doubles with each. */
  fails: number;
  /** Woken on every banner and when the slot is gone. */
  waiters: Set<() => void>;
  alive: boolean;
}

export interface SupervisorOptions {
  rt: Runtime;
  /** The environment the workers inherit (that of `start`). */
  env: NodeJS.ProcessEnv;
  /** Node script the workers run (this process's); default process.argv[1]. */
  script?: string;
}

export async function superviseIngest({ rt, env, script }: SupervisorOptions): Promise<RoleHandle> {
  const { config } = rt;
  const logger = rt.logger.child({ pkg: 'ingest-supervisor' });
  const n = config.ingestWorkers;
  const bin = script ?? process.argv[1];
  if (!bin) throw errors.config('SPILLWAY_INGEST_WORKERS: this process was not started from a script');
  let stopping = false;
  let starting = true;
  const slots: Slot[] = Array.from({ length: n }, (_, index) => ({
    index,
    startedAt: 0,
    fails: 0,
    waiters: new Set(),
    alive: false,
  }));
  const wake = (s: Slot) => {
    for (const w of [...s.waiters]) w();
  };

  const spawnSlot = (s: Slot) => {
    if (stopping) return;
    // Each worker is an ordinary single-process ingest: no workers of its own, no edge (the
    // supervisor attaches it once for the host), its admin port ephemeral (one per process).
    const child = spawn(process.execPath, [...process.execArgv, bin, 'start', '--role', 'ingest'], {
      stdio: ['ignore', 'pipe', 'inherit'],
      env: {
        ...env,
        SPILLWAY_INGEST_WORKERS: '1',
        SPILLWAY_ADMIN_PORT: '0',
        SPILLWAY_EDGE: 'off',
        [SUPERVISOR_ENV]: String(process.pid),
      },
    });
    s.child = child;
    s.pid = undefined;
    s.alive = true;
    s.startedAt = Date.now();
    child.on('error', (err) => logger.error({ err, worker: s.index }, 'ingest worker could not be started'));
    let buf = '';
    const forward = (line: string) => {
      // Whole lines only: the workers' banners and logs reach our stdout without interleaving.
      process.stdout.write(line);
      const m = RUNNING.exec(line);
      if (m) {
        s.pid = Number(m[1]);
        wake(s);
      }
    };
    child.stdout?.on('data', (d: Buffer) => {
      buf += d.toString();
      for (let i = buf.indexOf('\n'); i >= 0; i = buf.indexOf('\n')) {
        forward(buf.slice(0, i + 1));
        buf = buf.slice(i + 1);
      }
    });
    child.stdout?.on('close', () => {
      if (buf) forward(`${buf}\n`);
      gone(s);
    });
  };

  const gone = (s: Slot) => {
    const pid = s.pid;
    s.alive = false;
    s.pid = undefined;
    wake(s);
    if (stopping || starting) return;
    s.fails = Date.now() - s.startedAt < QUICK_DEATH_MS ? s.fails + 1 : 0;
    const delayMs = Math.min(30_000, 250 * 2 ** s.fails);
    logger.error({ worker: s.index, pid, restartInMs: delayMs }, 'ingest worker gone; restarting it');
    setTimeout(() => spawnSlot(s), delayMs).unref();
  };

  /** Resolves with the slot's pid once it differs from `not` (a banner), rejects if the slot dies. */
  const nextPid = (s: Slot, not: number | undefined, timeoutMs: number) =>
    new Promise<number>((resolve, reject) => {
      const done = (f: () => void) => {
        clearTimeout(timer);
        s.waiters.delete(check);
        f();
      };
      const check = () => {
        if (s.pid !== undefined && s.pid !== not) {
          const pid = s.pid;
          done(() => resolve(pid));
        } else if (!s.alive)
          done(() => reject(new Error(`ingest worker ${s.index} exited before it served`)));
      };
      const timer = setTimeout(
        () => done(() => reject(new Error(`ingest worker ${s.index}: no banner in ${timeoutMs} ms`))),
        timeoutMs,
      );
      s.waiters.add(check);
      check();
    });

  const signalAll = (sig: NodeJS.Signals) => {
    for (const s of slots) {
      for (const pid of new Set([s.pid, s.child?.pid])) {
        if (pid === undefined) continue;
        try {
          process.kill(pid, sig);
        } catch {
          // already gone
        }
      }
    }
  };

  const stopWorkers = async () => {
    stopping = true;
    signalAll('SIGTERM');
    const all = Promise.all(
      slots.map(
        (s) =>
          new Promise<void>((r) => {
            const check = () => {
              if (s.alive) return;
              s.waiters.delete(check);
              r();
            };
            s.waiters.add(check);
            check();
          }),
      ),
    );
    const timer = setTimeout(() => signalAll('SIGKILL'), 15_000);
    await all;
    clearTimeout(timer);
  };

  // The edge's allowlist follows the sources (their allowCidrs), like a single ingest's does.
  let edge: EdgeHandle | undefined;
  let cache: ConfigCache | undefined;
  let steering: SteeringHandle | undefined;
  let steerNote: string | undefined;
  const onHup = () => signalAll('SIGHUP');
  try {
    if (config.edge.enabled) {
      const store = new ConfigStore(rt.redis, rt.keys, rt.secrets);
      cache = new ConfigCache(store);
      const sub = createRedis(config.redis);
      sub.on('error', (err: Error) => logger.warn({ err }, 'config subscription connection error'));
      await cache.subscribe(sub, rt.keys, logger);
      edge = await startEdge(config, config.ingestPort, () => store.listAllSources(), logger);
      cache.onChange((c) => {
        if (c.kind !== 'endpoint') edge?.sourcesChanged();
      });
    }
    for (const s of slots) spawnSlot(s);
    const pids = await Promise.all(slots.map((s) => nextPid(s, undefined, START_TIMEOUT_MS)));
    starting = false;
    logger.info({ pids }, 'ingest workers serving');
    if (config.edge.enabled) steerNote = await steer();
  } catch (err) {
    starting = false;
    await stopWorkers();
    edge?.stop();
    await cache?.close();
    throw new Error(`${(err as Error).message} (SPILLWAY_INGEST_WORKERS=${n}; its output is above)`);
  }
  // The supervisor's own /metrics (the admin port) carries the kernel's counters too.
  if (!registry.getSingleMetric('spillway_kernel_drops_total')) registerKernelDropMetrics(registry);
  // Only with TLS does a worker handle SIGHUP (certificate reload); without it SIGHUP keeps its
  // default here as in a single ingest process.
  if (config.tls) process.on('SIGHUP', onHup);

  /**
   * The steering daemon over the group. Restarted if it dies (not when refused: 77); its one line
   * for the banner says whether it runs.
   */
  async function steer(): Promise<string> {
    const st = startSteering({ port: config.ingestPort });
    if (!st.available) return `steering not attached (${st.reason})`;
    steering = st.steering;
    const child = st.steering.child;
    child.once('exit', (code) => {
      if (stopping || code === 77 || steering?.child !== child) return;
      logger.warn({ code }, 'edge: steering daemon exited; restarting it');
      steering = undefined;
      setTimeout(() => void (stopping || steer()), 1000).unref();
    });
    try {
      await st.steering.ready(n, 10_000);
      return `SK_REUSEPORT steering across ${n} ingest workers`;
    } catch (err) {
      steering = undefined;
      await st.steering.stop();
      return `steering not attached (${(err as Error).message})`;
    }
  }

  const edgeLine = () => {
    if (!edge) return undefined;
    if (!edge.reason) return `edge: ${edge.note}; ${steerNote}`;
    // Refused for want of capabilities, steering was refused for the same reason: one "why not".
    if (steerNote?.includes(edge.reason)) return `edge: ${edge.note}`;
    return `edge: XDP and drop tracer not attached (${edge.reason}); ${steerNote}`;
  };

  let handingOver = false;
  return {
    name: 'ingest',
    port: config.ingestPort,
    notes: [
      `ingest workers: ${n} processes (pids ${slots.map((s) => s.pid).join(', ')}), each with its own SO_REUSEPORT socket; restarted when one dies`,
      ...(edgeLine() ? [edgeLine()!] : []),
    ],
    async handover() {
      if (handingOver) return void logger.warn('handover already under way; SIGUSR2 ignored');
      handingOver = true;
      try {
        // One worker at a time: the others keep serving the group while each hands its own socket
        // over to its successor (the same socket: nothing in its accept queue is lost).
        for (const s of slots) {
          const from = s.pid;
          if (from === undefined) continue;
          const next = nextPid(s, from, START_TIMEOUT_MS + 5000);
          try {
            process.kill(from, 'SIGUSR2');
            const to = await next;
            logger.info({ worker: s.index, from, to }, 'ingest worker handed over');
          } catch (err) {
            next.catch(() => {});
            logger.error({ err, worker: s.index, from }, 'ingest worker handover failed');
          }
        }
      } finally {
        handingOver = false;
      }
    },
    async close() {
      process.off('SIGHUP', onHup);
      stopping = true;
      // Detach steering first: the kernel hash then spreads over the workers until they close.
      await steering?.stop();
      edge?.stop();
      await cache?.close();
      await stopWorkers();
    },
  };
}

/**
 * Private redis-servers on loopback for tests, benchmarks and chaos runs that stop, crash or
 * restart Redis, or that need a Redis counting only their own calls: never the shared one on 6390.
 * Each child is SIGKILLed when the process exits, also when a run throws or is interrupted.
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { freePort } from './ports.ts';
import { waitFor } from './wait.ts';

const run = promisify(execFile);

const live = new Set<ChildProcess>();
let hooked = false;

function spawnRedis(args: string[]): ChildProcess {
  if (!hooked) {
    hooked = true;
    process.on('exit', () => {
      for (const c of live) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
    });
  }
  const child = spawn('redis-server', args, { stdio: 'ignore' });
  live.add(child);
  child.once('exit', () => live.delete(child));
  return child;
}

async function redisCli(port: number, ...args: string[]): Promise<string> {
  return (
    await run('redis-cli', ['-p', String(port), ...args], { timeout: 5_000 }).catch(() => ({ stdout: '' }))
  ).stdout;
}

async function exited(child: ChildProcess | undefined, signal?: NodeJS.Signals): Promise<void> {
  if (!child || child.exitCode !== null || child.signalCode !== null) return;
  const done = new Promise((r) => child.once('exit', r));
  if (signal) child.kill(signal);
  await done;
}

export interface PrivateRedisOptions {
  /**
   * AOF fsync policy, or `off` for no AOF. Default `everysec`, as in production; `always` when a
   * test counts on every acknowledged write surviving a stop.
   */
  aof?: 'always' | 'everysec' | 'off';
}

/**
 * One redis-server (noeviction, as Spillway requires) on `port` (a free one when omitted) with its
 * data in a temporary directory, so `stop()` then `start()` comes back with the same data.
 */
export class PrivateRedis {
  readonly dir = mkdtempSync(join(tmpdir(), 'spw-redis-'));
  port: number;
  readonly #aof: NonNullable<PrivateRedisOptions['aof']>;
  #child: ChildProcess | undefined;

  constructor(port = 0, options: PrivateRedisOptions = {}) {
    this.port = port;
    this.#aof = options.aof ?? 'everysec';
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  /** Starts the server and resolves once it answers PING. */
  async start(): Promise<void> {
    if (!this.port) this.port = await freePort();
    const aof =
      this.#aof === 'off' ? ['--appendonly', 'no'] : ['--appendonly', 'yes', '--appendfsync', this.#aof];
    this.#child = spawnRedis([
      ...['--port', String(this.port), '--bind', '127.0.0.1', '--dir', this.dir, '--save', ''],
      ...aof,
      ...['--maxmemory-policy', 'noeviction'],
    ]);
    await waitFor(
      async () => (await redisCli(this.port, 'ping')).includes('PONG'),
      `redis on ${this.port}`,
      20_000,
    );
  }

  /** SHUTDOWN: the AOF is flushed and fsynced, an orderly stop as an operator's restart is. */
  async stop(): Promise<void> {
    const child = this.#child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const done = exited(child);
    await redisCli(this.port, 'shutdown');
    // A server that does not go within 10 s is killed, so a stuck SHUTDOWN cannot hang the run.
    const t = setTimeout(() => child.kill('SIGKILL'), 10_000);
    await done;
    clearTimeout(t);
  }

  /** SIGKILL: a crash. */
  async kill(): Promise<void> {
    await exited(this.#child, 'SIGKILL');
  }

  /** Kills the server and removes its data. */
  async destroy(): Promise<void> {
    await this.kill();
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** A private redis-server on a free port, already started. */
export async function startPrivateRedis(options: PrivateRedisOptions = {}): Promise<PrivateRedis> {
  const r = new PrivateRedis(0, options);
  await r.start();
  return r;
}

/**
 * A private Redis Cluster of `nodes` masters on loopback (random client and cluster-bus ports, AOF
 * on, noeviction), for tests that run Spillway against `redis+cluster://`.
 */
export class PrivateRedisCluster {
  readonly dir = mkdtempSync(join(tmpdir(), 'spw-cluster-'));
  readonly ports: number[] = [];
  readonly #children: ChildProcess[] = [];

  get url(): string {
    return `redis+cluster://${this.ports.map((p) => `127.0.0.1:${p}`).join(',')}`;
  }

  async start(nodes = 3): Promise<void> {
    for (let i = 0; i < nodes; i++) {
      const port = await freePort();
      const busPort = await freePort();
      this.ports.push(port);
      this.#children.push(
        spawnRedis([
          ...['--port', String(port), '--bind', '127.0.0.1', '--dir', this.dir, '--save', ''],
          ...['--cluster-enabled', 'yes', '--cluster-port', String(busPort)],
          ...['--cluster-config-file', `nodes-${port}.conf`, '--cluster-node-timeout', '5000'],
          ...['--appendonly', 'yes', '--appendfilename', `aof-${port}.aof`, '--appenddirname', `aof-${port}`],
          ...['--maxmemory-policy', 'noeviction'],
        ]),
      );
    }
    for (const p of this.ports)
      await waitFor(async () => (await redisCli(p, 'ping')).includes('PONG'), `cluster node ${p}`, 10_000);
    const addrs = this.ports.map((p) => `127.0.0.1:${p}`);
    await run('redis-cli', ['--cluster', 'create', ...addrs, '--cluster-replicas', '0', '--cluster-yes'], {
      timeout: 30_000,
    });
    for (const p of this.ports)
      await waitFor(
        async () => (await redisCli(p, 'cluster', 'info')).includes('cluster_state:ok'),
        `cluster state ok on ${p}`,
        20_000,
        100,
      );
  }

  async stop(): Promise<void> {
    await Promise.all(this.#children.map((c) => exited(c, 'SIGTERM')));
    rmSync(this.dir, { recursive: true, force: true });
  }
}

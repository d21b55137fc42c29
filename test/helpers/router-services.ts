import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { waitFor } from './spawn.ts';

const run = promisify(execFile);
const ROOT = fileURLToPath(new URL('../../', import.meta.url));

/** A free TCP port on 127.0.0.1 (listen(0), then close). */
export async function freePort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const port = (srv.address() as { port: number }).port;
  await new Promise<void>((r) => srv.close(() => r()));
  return port;
}

/**
 * A private redis-server (AOF on, appendfsync always, noeviction) on a random port that a test may
 * restart — never the shared one on 6390.
 */
export class PrivateRedis {
  readonly port: number;
  readonly dir = mkdtempSync(join(tmpdir(), 'spw-redis-'));
  #child: ChildProcess | undefined;

  constructor(port: number) {
    this.port = port;
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  async start(): Promise<void> {
    this.#child = spawn(
      'redis-server',
      [
        '--port',
        String(this.port),
        '--bind',
        '127.0.0.1',
        '--dir',
        this.dir,
        '--appendonly',
        'yes',
        '--appendfsync',
        'always',
        '--save',
        '',
        '--maxmemory-policy',
        'noeviction',
      ],
      { stdio: 'ignore' },
    );
    await waitFor(
      async () =>
        (
          await run('redis-cli', ['-p', String(this.port), 'ping']).catch(() => ({ stdout: '' }))
        ).stdout.includes('PONG'),
      'private redis',
      10_000,
    );
  }

  /** Clean shutdown (the AOF is complete), as an operator's restart would do. */
  async stop(): Promise<void> {
    const child = this.#child;
    if (!child || child.exitCode !== null) return;
    const exited = new Promise((r) => child.once('exit', r));
    await run('redis-cli', ['-p', String(this.port), 'shutdown']).catch(() => {});
    await exited;
  }
}

/** A second Kafka broker (own state dir and ports) that a test may stop and start; the shared one is never touched. */
export class PrivateKafka {
  readonly port: number;
  readonly controllerPort: number;
  readonly stateDir = mkdtempSync(join(tmpdir(), 'spw-kafka-'));

  constructor(port: number, controllerPort: number) {
    this.port = port;
    this.controllerPort = controllerPort;
  }

  get brokers(): string {
    return `127.0.0.1:${this.port}`;
  }

  #env() {
    return {
      ...process.env,
      SPILLWAY_STATE_DIR: this.stateDir,
      SPILLWAY_LOCAL_KAFKA_PORT: String(this.port),
      SPILLWAY_LOCAL_KAFKA_CONTROLLER_PORT: String(this.controllerPort),
    };
  }

  async start(): Promise<void> {
    await run('bash', [join(ROOT, 'infra/local/kafka.sh'), 'start'], { env: this.#env(), timeout: 90_000 });
  }

  async stop(): Promise<void> {
    await run('bash', [join(ROOT, 'infra/local/kafka.sh'), 'stop'], { env: this.#env(), timeout: 60_000 });
  }
}

/**
 * A Redis and a Kafka broker of the chaos run's own, which it may stop and start: the shared ones
 * (6390, 9092) serve everybody else's tests and are never touched.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort, type Proc, run, runToEnd, sleep, until } from '../../bench/lib/procs.ts';

export class OwnRedis {
  readonly dir = mkdtempSync(join(tmpdir(), 'spw-chaos-redis-'));
  port = 0;
  proc: Proc | undefined;

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  async start(): Promise<void> {
    if (!this.port) this.port = await freePort();
    // AOF everysec, like production; noeviction as Spillway requires.
    this.proc = run('redis-server', [
      '--port',
      String(this.port),
      '--bind',
      '127.0.0.1',
      '--dir',
      this.dir,
      '--save',
      '',
      '--appendonly',
      'yes',
      '--appendfsync',
      'everysec',
      '--maxmemory-policy',
      'noeviction',
    ]);
    await until(
      async () => (await runToEnd('redis-cli', ['-p', String(this.port), 'ping'], 2000)).out.includes('PONG'),
      `redis on ${this.port}`,
      20_000,
      100,
    );
  }

  /** SHUTDOWN (the AOF is flushed and fsynced: an orderly stop, as an operator's restart is). */
  async stop(): Promise<void> {
    await runToEnd('redis-cli', ['-p', String(this.port), 'shutdown'], 10_000);
    if (this.proc) await this.proc.stop(5000);
  }

  async destroy(): Promise<void> {
    if (this.proc) await this.proc.kill9();
    rmSync(this.dir, { recursive: true, force: true });
  }
}

const KAFKA_SH = fileURLToPath(new URL('../../../infra/local/kafka.sh', import.meta.url));

export class OwnKafka {
  readonly state = mkdtempSync(join(tmpdir(), 'spw-chaos-kafka-'));
  port = 0;
  cport = 0;
  #hooked = false;

  get brokers(): string {
    return `127.0.0.1:${this.port}`;
  }

  #env() {
    return {
      ...process.env,
      SPILLWAY_STATE_DIR: this.state,
      SPILLWAY_LOCAL_KAFKA_PORT: String(this.port),
      SPILLWAY_LOCAL_KAFKA_CONTROLLER_PORT: String(this.cport),
    };
  }

  async start(): Promise<void> {
    if (!this.port) {
      this.port = await freePort();
      this.cport = await freePort();
    }
    const r = await runToEnd('bash', [KAFKA_SH, 'start'], 120_000, this.#env());
    // The broker is a nohup'd JVM, not our child: make sure an aborted run still stops it (by pid).
    if (!this.#hooked) {
      this.#hooked = true;
      process.on('exit', () => {
        try {
          const pid = Number(readFileSync(join(this.state, 'kafka', 'kafka.pid'), 'utf8'));
          if (pid > 1) process.kill(pid, 'SIGKILL');
        } catch {}
      });
    }
    if (r.code !== 0) throw new Error(`own kafka did not start: ${(r.err || r.out).trim().slice(-400)}`);
  }

  async stop(): Promise<void> {
    await runToEnd('bash', [KAFKA_SH, 'stop'], 60_000, this.#env());
  }

  async destroy(): Promise<void> {
    await this.stop().catch(() => {});
    await sleep(100);
    rmSync(this.state, { recursive: true, force: true });
  }
}

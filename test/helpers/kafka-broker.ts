/**
 * A Kafka broker of a test's or chaos run's own (own state dir and ports, started by
 * infra/local/kafka.sh) that it may stop and start: the shared one on 9092 is never touched.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { type Admin, Kafka, logLevel } from 'kafkajs';
import { freePort } from './ports.ts';

const run = promisify(execFile);
const KAFKA_SH = fileURLToPath(new URL('../../infra/local/kafka.sh', import.meta.url));

export class PrivateKafka {
  readonly stateDir = mkdtempSync(join(tmpdir(), 'spw-kafka-'));
  port = 0;
  controllerPort = 0;
  #hooked = false;

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

  /** Starts the broker on free ports (the same ones again on a restart); resolves once it serves. */
  async start(): Promise<void> {
    if (!this.port) {
      this.port = await freePort();
      this.controllerPort = await freePort();
    }
    // The broker is a nohup'd JVM, not our child: make sure an aborted run still stops it (by pid).
    if (!this.#hooked) {
      this.#hooked = true;
      process.on('exit', () => {
        try {
          const pid = Number(readFileSync(join(this.stateDir, 'kafka', 'kafka.pid'), 'utf8'));
          if (pid > 1) process.kill(pid, 'SIGKILL');
        } catch {}
      });
    }
    try {
      await run('bash', [KAFKA_SH, 'start'], { env: this.#env(), timeout: 120_000 });
    } catch (err) {
      const e = err as { stdout?: string; stderr?: string; message: string };
      throw new Error(
        `private kafka did not start: ${(e.stderr || e.stdout || e.message).trim().slice(-400)}`,
      );
    }
  }

  async stop(): Promise<void> {
    await run('bash', [KAFKA_SH, 'stop'], { env: this.#env(), timeout: 60_000 });
  }

  /** Stops the broker (best effort) and removes its state. */
  async destroy(): Promise<void> {
    await this.stop().catch(() => {});
    rmSync(this.stateDir, { recursive: true, force: true });
  }
}

/** Runs `fn` with a connected kafkajs admin on `brokers` (a list or comma-separated), disconnecting after. */
export async function withKafkaAdmin<T>(
  brokers: string | string[],
  clientId: string,
  fn: (admin: Admin) => Promise<T>,
): Promise<T> {
  const list = typeof brokers === 'string' ? brokers.split(',') : brokers;
  const admin = new Kafka({ clientId, brokers: list, logLevel: logLevel.NOTHING }).admin();
  await admin.connect();
  try {
    return await fn(admin);
  } finally {
    await admin.disconnect().catch(() => {});
  }
}

import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';

/**
 * A private redis-server (AOF on) on a random port, for tests that stop and restart Redis. Never
 * the shared one on 6390.
 */
export interface OwnRedis {
  url: string;
  port: number;
  start(): Promise<void>;
  /** Kills the server (SIGKILL: like a crash). */
  stop(): Promise<void>;
  cleanup(): Promise<void>;
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const p = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(p));
    });
    s.on('error', reject);
  });
}

export async function ownRedis(): Promise<OwnRedis> {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'spw-redis-'));
  let child: ChildProcess | undefined;
  const self: OwnRedis = {
    url: `redis://127.0.0.1:${port}`,
    port,
    async start() {
      child = spawn(
        'redis-server',
        ['--port', String(port), '--bind', '127.0.0.1', '--appendonly', 'yes', '--dir', dir, '--save', ''],
        {
          stdio: 'ignore',
        },
      );
      const probe = new Redis({
        port,
        host: '127.0.0.1',
        lazyConnect: true,
        maxRetriesPerRequest: 0,
        retryStrategy: () => null,
      });
      probe.on('error', () => {});
      for (let i = 0; i < 100; i++) {
        try {
          await probe.connect();
          await probe.ping();
          probe.disconnect();
          return;
        } catch {
          probe.disconnect();
          await new Promise((r) => setTimeout(r, 50));
        }
      }
      throw new Error(`redis-server on ${port} did not start`);
    },
    async stop() {
      const c = child;
      if (!c || c.exitCode !== null) return;
      const exited = new Promise((r) => c.once('exit', r));
      c.kill('SIGKILL');
      await exited;
    },
    async cleanup() {
      await self.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
  await self.start();
  return self;
}

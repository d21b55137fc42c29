import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { freePort } from './router-services.ts';
import { waitFor } from './spawn.ts';

const run = promisify(execFile);

/**
 * A private 3-master Redis Cluster on loopback (random client and cluster-bus ports, AOF on,
 * noeviction), for tests that run Spillway against `redis+cluster://`. Never touches the shared
 * Redis on 6390.
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
      const child = spawn(
        'redis-server',
        [
          '--port',
          String(port),
          '--bind',
          '127.0.0.1',
          '--cluster-enabled',
          'yes',
          '--cluster-port',
          String(busPort),
          '--cluster-config-file',
          `nodes-${port}.conf`,
          '--cluster-node-timeout',
          '5000',
          '--dir',
          this.dir,
          '--appendonly',
          'yes',
          '--appendfilename',
          `aof-${port}.aof`,
          '--appenddirname',
          `aof-${port}`,
          '--save',
          '',
          '--maxmemory-policy',
          'noeviction',
        ],
        { stdio: 'ignore' },
      );
      this.#children.push(child);
    }
    for (const p of this.ports)
      await waitFor(
        async () =>
          (await run('redis-cli', ['-p', String(p), 'ping']).catch(() => ({ stdout: '' }))).stdout.includes(
            'PONG',
          ),
        `cluster node ${p}`,
        10_000,
      );
    await run(
      'redis-cli',
      [
        '--cluster',
        'create',
        ...this.ports.map((p) => `127.0.0.1:${p}`),
        '--cluster-replicas',
        '0',
        '--cluster-yes',
      ],
      { timeout: 30_000 },
    );
    for (const p of this.ports)
      await waitFor(
        async () =>
          (
            await run('redis-cli', ['-p', String(p), 'cluster', 'info']).catch(() => ({ stdout: '' }))
          ).stdout.includes('cluster_state:ok'),
        `cluster state ok on ${p}`,
        20_000,
        100,
      );
  }

  async stop(): Promise<void> {
    await Promise.all(
      this.#children.map((c) => {
        if (c.exitCode !== null) return undefined;
        const exited = new Promise((r) => c.once('exit', r));
        c.kill('SIGTERM');
        return exited;
      }),
    );
    rmSync(this.dir, { recursive: true, force: true });
  }
}

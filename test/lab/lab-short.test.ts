import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

/**
 * The scale-out lab in its CI form (`pnpm lab --short`, docs/scaling.md): a 3-broker KRaft Kafka and
 * a Redis Cluster of 3 masters + 3 replicas of its own, 2 ingest and 3 worker processes under load,
 * one Kafka broker kill -9 and one Redis master failover. Every event answered 2xx must be
 * delivered.
 */
const RUN = fileURLToPath(new URL('./run.ts', import.meta.url));

describe('scale-out lab (short)', () => {
  it('loses no acknowledged event through a broker kill and a Redis master failover', async () => {
    const child = spawn(process.execPath, [RUN, '--short'], {
      env: { ...process.env, SPILLWAY_LOG_LEVEL: 'warn' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (d) => {
      out = (out + d).slice(-200_000);
    });
    child.stderr.on('data', (d) => {
      out = (out + d).slice(-200_000);
    });
    const code = await new Promise<number | null>((resolve) => child.on('exit', (c) => resolve(c)));
    console.log(out.slice(out.indexOf('Fault table')));
    for (const fault of ['kafka-broker', 'redis-failover']) {
      // | fault | accepted | delivered | lost | …
      const row = new RegExp(`\\| ${fault} \\| (\\d+) \\| (\\d+) \\| (\\d+) \\|`).exec(out);
      expect(row, `${fault} row`).not.toBeNull();
      expect(Number(row![1]), `${fault} accepted`).toBeGreaterThan(1000);
      expect(Number(row![3]), `${fault} lost`).toBe(0);
      expect(Number(row![2]), `${fault} delivered`).toBe(Number(row![1]));
    }
    expect(out).toContain('lab: no acknowledged event lost');
    expect(code, out.slice(-3000)).toBe(0);
  }, 600_000);
});

import { oneRunPerJob } from '@spillway/router/testing';
import type { Job } from 'bullmq';
import { describe, expect, it } from 'vitest';

const job = (id: string) => ({ id, queueName: 'intake' }) as Job<unknown>;

describe('oneRunPerJob (a job claimed again in the same process)', () => {
  it('a claim while the first run is going joins it: the job runs once and ends as the first ends', async () => {
    let runs = 0;
    let finish!: () => void;
    const joined: string[] = [];
    const wrapped = oneRunPerJob(
      async () => {
        runs++;
        await new Promise<void>((r) => {
          finish = r;
        });
      },
      (j) => joined.push(j.id!),
    );
    const a = wrapped(job('j1'));
    const b = wrapped(job('j1'));
    finish();
    await Promise.all([a, b]);
    expect(runs).toBe(1);
    expect(joined).toEqual(['j1']);
  });

  it('a claim after the first run succeeded (its completion lost with its lock) delivers nothing again; after a failed run the job runs again', async () => {
    const ran: string[] = [];
    const joined: string[] = [];
    const wrapped = oneRunPerJob(
      async (j) => {
        ran.push(j.id!);
        if (j.id === 'bad' && ran.filter((x) => x === 'bad').length === 1) throw new Error('redis blip');
      },
      (j) => joined.push(j.id!),
    );
    await wrapped(job('ok'));
    await wrapped(job('ok'));
    await expect(wrapped(job('bad'))).rejects.toThrow('redis blip');
    await wrapped(job('bad'));
    expect(ran).toEqual(['ok', 'bad', 'bad']);
    expect(joined).toEqual(['ok']);
  });
});

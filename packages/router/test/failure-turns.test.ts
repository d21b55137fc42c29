import net from 'node:net';
import { retryBucketOf, Turns } from '@spillway/router/testing';
import { afterEach, describe, expect, it } from 'vitest';

describe('a failure burst is settled in turns (worker/turns.ts)', () => {
  const closers: (() => void)[] = [];
  afterEach(() => {
    for (const c of closers.splice(0)) c();
  });

  it('I/O that arrives during one turn is handled before the next turn, not after the whole burst', async () => {
    // A real loopback connection: bytes written during the first turn reach the server in the
    // loop's next poll phase, which must come before the second turn.
    const order: string[] = [];
    const server = net.createServer((sock) => sock.on('data', () => order.push('io')));
    closers.push(() => server.close());
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const client = net.connect((server.address() as net.AddressInfo).port, '127.0.0.1');
    closers.push(() => client.destroy());
    await new Promise<void>((r) => client.once('connect', r));
    await new Promise((r) => setTimeout(r, 20)); // the server has accepted it

    const turns = new Turns();
    const settled = [1, 2, 3, 4].map((n) =>
      turns.next().then(() => {
        order.push(`settle ${n}`);
        if (n === 1) client.write('an answer for another tenant');
      }),
    );
    expect(turns.waiting).toBe(4);
    await Promise.all(settled);
    await new Promise((r) => setTimeout(r, 20));
    expect(turns.waiting).toBe(0);
    // All four at once would have been 'settle 1..4' and then 'io'.
    expect(order.indexOf('io')).toBeGreaterThan(order.indexOf('settle 1'));
    expect(order.indexOf('io')).toBeLessThan(order.indexOf('settle 4'));
    expect(order.filter((o) => o.startsWith('settle'))).toEqual([
      'settle 1',
      'settle 2',
      'settle 3',
      'settle 4',
    ]);
  });

  it('a long queue (a flood of failures) drains in a few hundred turns, not one per failure', async () => {
    const turns = new Turns();
    let iterations = 0;
    let counting = true;
    const count = () => {
      iterations++;
      if (counting) setImmediate(count);
    };
    setImmediate(count);
    await Promise.all(Array.from({ length: 5000 }, () => turns.next()));
    counting = false;
    // ~32·ln(5000/32) + 32 ≈ 200 turns; one per failure would be 5000.
    expect(iterations).toBeLessThan(400);
    expect(iterations).toBeGreaterThan(32);
  });

  it('a retry is never due early, and at most a tenth of its delay (or 50 ms) late', () => {
    for (let d = 1; d < 12 * 3_600_000; d = Math.ceil(d * 1.37) + 1) {
      const b = retryBucketOf(d);
      expect(b).toBeGreaterThanOrEqual(d);
      expect(b - d).toBeLessThan(Math.max(50, d / 10));
    }
  });

  it('sixteen tasks timing out together (5 s ± 20 %) share a handful of retry jobs', () => {
    // The delays nextRetryDelay gives the first retry, spread evenly over its jitter.
    const delays = Array.from({ length: 16 }, (_, i) => Math.round(5000 * (0.8 + (0.4 * i) / 15)));
    const jobs = new Set(delays.map(retryBucketOf)).size;
    expect(jobs).toBeLessThanOrEqual(8);
    // 50 ms buckets, as before: one job each.
    expect(new Set(delays.map((d) => Math.ceil(d / 50) * 50)).size).toBe(16);
  });
});

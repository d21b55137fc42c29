import { describe, expect, it } from 'vitest';
import { Breakers } from '../src/breakers.ts';

describe('Breakers: one per endpoint, bounded', () => {
  it('shuts down a breaker idle for idleMs and hands out a fresh one after', async () => {
    const b = new Breakers({ idleMs: 60, rollingCountTimeoutMs: 100, rollingCountBuckets: 10 });
    try {
      const first = b.get('t1', 'e1');
      expect(b.get('t1', 'e1')).toBe(first);
      await new Promise((r) => setTimeout(r, 250));
      expect(first.breaker.isShutdown).toBe(true);
      const second = b.get('t1', 'e1');
      expect(second).not.toBe(first);
      expect(second.breaker.isShutdown).toBe(false);
    } finally {
      b.close();
    }
  });

  it('keeps at most `max` breakers: the least recently used goes first', async () => {
    const b = new Breakers({ max: 2, rollingCountTimeoutMs: 100, rollingCountBuckets: 10 });
    try {
      const a = b.get('t', 'a');
      await new Promise((r) => setTimeout(r, 30)); // let the shared clock move
      const c = b.get('t', 'c');
      await new Promise((r) => setTimeout(r, 30));
      b.get('t', 'a'); // a is now more recent than c
      const d = b.get('t', 'd');
      expect(c.breaker.isShutdown).toBe(true);
      expect(a.breaker.isShutdown).toBe(false);
      expect(d.breaker.isShutdown).toBe(false);
    } finally {
      b.close();
    }
  });
});

import {
  BatchedWriter,
  errors,
  generateWhsec,
  ListWriter,
  parseScriptName,
  parseWhsec,
  retryDelayMs,
  retryForever,
  toResponse,
  withTimeout,
} from '@spillway/shared';
import { describe, expect, it } from 'vitest';
import { sleep, waitFor } from '../../../test/helpers/wait.ts';

describe('retryForever', () => {
  it('tries until the work succeeds, with capped doubling pauses', async () => {
    const seen: number[] = [];
    const ok = await retryForever(
      async (n) => {
        if (n < 2) throw new Error(`try ${n}`);
      },
      (_err, n) => {
        seen.push(n);
        return undefined;
      },
    );
    expect(ok).toBe(true);
    expect(seen).toEqual([0, 1]);
    expect([0, 1, 2, 3, 4, 5, 9].map(retryDelayMs)).toEqual([200, 400, 800, 1600, 3000, 3000, 3000]);
  });

  it('stops when onError says false', async () => {
    let tries = 0;
    const ok = await retryForever(
      async () => {
        tries++;
        throw new Error('down');
      },
      () => false,
    );
    expect(ok).toBe(false);
    expect(tries).toBe(1);
  });
});

describe('withTimeout', () => {
  it('passes a settled value through and rejects a late one', async () => {
    await expect(withTimeout(Promise.resolve(7), 50)).resolves.toBe(7);
    await expect(withTimeout(new Promise(() => {}), 20)).rejects.toThrow('timed out after 20 ms');
  });
});

describe('BatchedWriter', () => {
  it('collects what arrives within flushMs into one write', async () => {
    let buf: number[] = [];
    const writes: number[][] = [];
    const w = new BatchedWriter<number[]>({
      flushMs: 20,
      take: () => {
        const b = buf;
        buf = [];
        return b.length ? b : undefined;
      },
      write: async (b) => {
        writes.push(b);
      },
    });
    for (const n of [1, 2, 3]) {
      buf.push(n);
      w.schedule();
    }
    expect(writes).toEqual([]);
    await waitFor(() => writes.length > 0, 'the flush timer', 5_000, 5);
    expect(writes).toEqual([[1, 2, 3]]);
    buf.push(4);
    await w.flush();
    expect(writes).toEqual([[1, 2, 3], [4]]);
  });

  it('serial: one write at a time, what arrives meanwhile goes in the next; a failed write stops the loop', async () => {
    let buf: number[] = [];
    const writes: number[][] = [];
    let running = 0;
    let maxRunning = 0;
    let fail = false;
    const w = new BatchedWriter<number[]>({
      flushMs: 1000,
      serial: true,
      take: () => {
        const b = buf;
        buf = [];
        return b.length ? b : undefined;
      },
      write: async (b) => {
        running++;
        maxRunning = Math.max(maxRunning, running);
        await sleep(10); // a write that takes a while, so others can arrive meanwhile
        running--;
        writes.push(b);
        if (fail) {
          buf.unshift(...b); // put back, as TenantCounters does
          throw new Error('down');
        }
      },
    });
    buf.push(1);
    const first = w.flush();
    expect(w.busy).toBe(true);
    await waitFor(() => running === 1, 'the first write to run', 5_000, 1);
    buf.push(2, 3);
    const second = w.flush(); // the running loop takes these next
    await first;
    expect(writes).toEqual([[1]]); // first resolves once what it saw is written
    await second;
    expect(writes).toEqual([[1], [2, 3]]);
    expect(maxRunning).toBe(1);
    expect(w.busy).toBe(false);

    fail = true;
    buf.push(4);
    await w.flush();
    // Put back and not retried at once: the owner schedules the retry.
    expect(writes).toEqual([[1], [2, 3], [4]]);
    expect(buf).toEqual([4]);
  });
});

describe('BatchedWriter spacingMs', () => {
  it('a busy serial writer waits spacingMs between write starts, and flush() does not wait', async () => {
    const starts: number[] = [];
    const writes: number[][] = [];
    const w = new ListWriter<number>({
      flushMs: 1,
      serial: true,
      spacingMs: 60,
      write: async (b) => {
        starts.push(performance.now());
        writes.push(b);
      },
    });
    // A steady stream for ~250 ms: without spacing every event-loop turn would be its own write.
    const t0 = performance.now();
    let n = 0;
    while (performance.now() - t0 < 250) {
      w.add(n++);
      await sleep(2);
    }
    await waitFor(() => !w.busy, 'the writer to go idle', 5_000, 1);
    expect(writes.flat()).toEqual(Array.from({ length: n }, (_, i) => i));
    expect(writes.length).toBeLessThanOrEqual(6);
    for (let i = 1; i < starts.length; i++) expect(starts[i]! - starts[i - 1]!).toBeGreaterThanOrEqual(55);
    // flush() in the pause after a write starts the next write at once.
    w.add(-1);
    await waitFor(() => writes.length > 0 && writes.at(-1)!.includes(-1), 'the write of -1', 5_000, 1);
    w.add(-2);
    const f0 = performance.now();
    await w.flush();
    expect(writes.at(-1)).toEqual([-2]);
    expect(performance.now() - f0).toBeLessThan(40);
  });
});

describe('Lua script names', () => {
  it('follow <name>-<numkeys>.lua: a fixed count, or <k>n for k keys per item', () => {
    expect(parseScriptName('lease-1')).toEqual({ command: 'lease', numberOfKeys: 1 });
    expect(parseScriptName('dedup-reserve-1n')).toEqual({ command: 'dedupReserve', numberOfKeys: undefined });
    expect(parseScriptName('events-accept-2n')).toEqual({ command: 'eventsAccept', numberOfKeys: undefined });
    expect(() => parseScriptName('dedup-reserve-n')).toThrow(/<name>-<numkeys>/);
  });
});

describe('whsec_ secrets', () => {
  it('need the prefix and base64; the key is the decoded part', () => {
    const s = generateWhsec(32);
    expect(s.startsWith('whsec_')).toBe(true);
    expect(parseWhsec(s)).toHaveLength(32);
    expect(parseWhsec(`whsec_${Buffer.from('0123456789abcdef').toString('base64')}`)?.toString()).toBe(
      '0123456789abcdef',
    );
    expect(parseWhsec(Buffer.alloc(24, 1).toString('base64'))).toBeUndefined();
    expect(parseWhsec('whsec_not base64!')).toBeUndefined();
    expect(parseWhsec('whsec_')).toBeUndefined();
  });
});

describe('toResponse', () => {
  it('answers catalog errors with their status, code and Retry-After', () => {
    const r = toResponse(errors.unavailable('busy', { retryAfter: 2 }));
    expect(r.status).toBe(503);
    expect(r.headers).toEqual({ 'retry-after': '2' });
    expect(r.body).toEqual({ error: { code: 'unavailable', message: 'busy' } });
  });

  it('maps Redis down to 503, framework 4xx by code, anything else to a 500 that hides the message', () => {
    const down = toResponse(Object.assign(new Error('Connection is closed.'), {}));
    expect([down.status, down.body.error.code, down.headers['retry-after']]).toEqual([
      503,
      'unavailable',
      '1',
    ]);
    const json = toResponse(
      Object.assign(new Error('bad json'), { statusCode: 400, code: 'FST_ERR_CTP_INVALID_JSON_BODY' }),
    );
    expect([json.status, json.body.error.code]).toEqual([400, 'invalid_json']);
    const media = toResponse(Object.assign(new Error('nope'), { statusCode: 415 }));
    expect([media.status, media.body.error.code]).toEqual([415, 'unsupported_media_type']);
    const boom = toResponse(new Error('secret detail'));
    expect(boom.status).toBe(500);
    expect(boom.body).toEqual({ error: { code: 'internal', message: 'internal error' } });
    expect(boom.error.cause).toBeInstanceOf(Error);
  });
});

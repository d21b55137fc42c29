import type { ServerResponse } from 'node:http';
import { toResponse } from '@spillway/shared';

/** What a stream sends when a snapshot cannot be made: the API's own error body, and its status. */
export interface StreamError {
  status: number;
  error: { code: string; message: string };
}

/** The same status and words the /v1 API would answer for this error (shared `toResponse`). */
export function toStreamError(err: unknown): StreamError {
  const res = toResponse(err);
  return { status: res.status, error: res.body.error };
}

/**
 * Server-sent events fan-out. Subscribers of one topic (the overview, or one tenant) share ONE
 * producer loop: it computes a snapshot, writes it to every subscriber, waits for the rest of the
 * period, and stops when the last subscriber leaves. So N open consoles cost one computation per
 * second per topic, not N — and a console never polls.
 *
 * A snapshot that takes longer than the period delays the next one rather than overlapping it. A
 * subscriber whose socket cannot keep up (its buffer holds more than `maxBuffered` bytes) is
 * dropped; the console reconnects.
 */
export class SnapshotHub {
  readonly #periodMs: number;
  readonly #maxBuffered: number;
  readonly #topics = new Map<string, Topic>();
  #closed = false;

  readonly #maxAgeMs: number;

  /**
   * @param opts.maxAgeMs how long one stream lives before the server ends it. The console then
   *   reconnects, which authenticates its token again: a revoked key loses its live numbers within
   *   this time, not only when the tab is closed.
   */
  constructor(opts: { periodMs?: number; maxBufferedBytes?: number; maxAgeMs?: number } = {}) {
    this.#periodMs = opts.periodMs ?? 1000;
    this.#maxBuffered = opts.maxBufferedBytes ?? 8 * 1024 * 1024;
    this.#maxAgeMs = opts.maxAgeMs ?? 60_000;
  }

  get subscribers(): number {
    let n = 0;
    for (const t of this.#topics.values()) n += t.subs.size;
    return n;
  }

  /**
   * Starts sending `produce()`'s snapshots on `res` (already hijacked from fastify). Each snapshot
   * is `event: snapshot`; a failure is `event: failure` with a StreamError body, and the loop goes
   * on (a Redis outage shows as failures, then snapshots again once it is back).
   */
  subscribe(topic: string, res: ServerResponse, produce: () => Promise<unknown>): void {
    if (this.#closed) {
      res.end();
      return;
    }
    res.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-store',
      connection: 'keep-alive',
      'x-accel-buffering': 'no',
    });
    // The browser's reconnect hint; the console reconnects on its own as well.
    res.write('retry: 1000\n\n');
    let t = this.#topics.get(topic);
    if (!t) {
      t = { subs: new Set(), produce, last: undefined, running: false };
      this.#topics.set(topic, t);
    }
    t.subs.add(res);
    // A newcomer gets the latest snapshot at once instead of waiting for the next tick.
    if (t.last !== undefined) res.write(t.last);
    let expire: NodeJS.Timeout | undefined;
    const drop = () => {
      clearTimeout(expire);
      this.#topics.get(topic)?.subs.delete(res);
    };
    expire = setTimeout(() => {
      drop();
      res.end();
    }, this.#maxAgeMs);
    expire.unref();
    res.on('close', drop);
    res.on('error', drop);
    if (!t.running) void this.#run(topic, t);
  }

  async #run(topic: string, t: Topic): Promise<void> {
    t.running = true;
    try {
      while (!this.#closed && t.subs.size > 0) {
        const started = Date.now();
        let frame: string;
        try {
          frame = `event: snapshot\ndata: ${JSON.stringify(await t.produce())}\n\n`;
        } catch (err) {
          frame = `event: failure\ndata: ${JSON.stringify(toStreamError(err))}\n\n`;
        }
        t.last = frame;
        for (const res of t.subs) {
          if (res.writableLength > this.#maxBuffered) {
            t.subs.delete(res);
            res.destroy();
            continue;
          }
          res.write(frame);
        }
        const wait = this.#periodMs - (Date.now() - started);
        if (wait > 0) await new Promise((r) => setTimeout(r, wait).unref());
      }
    } finally {
      t.running = false;
      if (t.subs.size === 0 && this.#topics.get(topic) === t) this.#topics.delete(topic);
      else if (!this.#closed && t.subs.size > 0) void this.#run(topic, t);
    }
  }

  /** Ends every stream (the server is closing: an open SSE response would keep it waiting). */
  close(): void {
    this.#closed = true;
    for (const t of this.#topics.values()) for (const res of t.subs) res.end();
    this.#topics.clear();
  }
}

interface Topic {
  subs: Set<ServerResponse>;
  produce: () => Promise<unknown>;
  last: string | undefined;
  running: boolean;
}

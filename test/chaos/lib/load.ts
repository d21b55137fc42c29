/**
 * The provider side of a chaos run: signed GitHub deliveries at a steady rate, each with a distinct
 * body (Spillway deduplicates GitHub bodies) and a unique X-GitHub-Delivery (which Spillway uses as
 * the event id, so the sink's webhook-id maps back to it).
 * Every answer is recorded; only 2xx answers count as accepted. No client retries: an event that
 * got no 2xx is not Spillway's to deliver.
 */
import { randomBytes } from 'node:crypto';
import type { Source } from '@spillway/shared';
import { Agent, request } from 'undici';
import { eventBody, signGithub } from '../../bench/lib/spillway.ts';
import { Samples } from '../../bench/lib/stats.ts';
import { sleep } from '../../helpers/wait.ts';

export class LoadGen {
  /** Prefix of every delivery id this load sends. */
  readonly tag: string;
  readonly accepted = new Set<string>();
  readonly statuses = new Map<string, number>();
  /** Client-side latency of accepted requests, ms. */
  latency = new Samples();
  sent = 0;
  #stop = false;
  #loop: Promise<void> | undefined;
  readonly #agent = new Agent({
    connections: 64,
    headersTimeout: 15_000,
    bodyTimeout: 15_000,
    keepAliveTimeout: 4000,
  });
  readonly #pending = new Set<Promise<void>>();

  readonly port: () => number;
  readonly source: Source;
  readonly bodySize: number;

  constructor(port: () => number, source: Source, bodySize = 512, tag = randomBytes(3).toString('hex')) {
    this.port = port;
    this.source = source;
    this.bodySize = bodySize;
    this.tag = tag;
  }

  /** Called as each request is sent; a subclass may count them (the lab counts them per second). */
  protected onSent(): void {}

  /** Called with each answer's key (status code, or `error:<code>`) and whether it was accepted. */
  protected onAnswer(_key: string, _accepted: boolean): void {}

  count(key: string): number {
    return this.statuses.get(key) ?? 0;
  }

  async #one(): Promise<void> {
    const id = `${this.tag}-${++this.sent}`;
    // The id in the body makes every body distinct: Spillway deduplicates GitHub bodies on
    // sha256(body), and a repeated body under a new id would be a 200 duplicate, not an event.
    const body = eventBody(this.bodySize, undefined, id);
    const t0 = performance.now();
    let key: string;
    let accepted = false;
    this.onSent();
    try {
      const res = await request(`http://127.0.0.1:${this.port()}/ingest/${this.source.id}`, {
        method: 'POST',
        dispatcher: this.#agent,
        body,
        headers: {
          'content-type': 'application/json',
          'x-github-event': 'push',
          'x-github-delivery': id,
          'x-hub-signature-256': signGithub(this.source.secret, body),
        },
      });
      await res.body.dump();
      key = String(res.statusCode);
      if (res.statusCode >= 200 && res.statusCode < 300) {
        accepted = true;
        this.accepted.add(id);
        this.latency.add(performance.now() - t0);
      }
    } catch (err) {
      key = `error:${(err as { code?: string }).code ?? 'other'}`;
    }
    this.statuses.set(key, (this.statuses.get(key) ?? 0) + 1);
    this.onAnswer(key, accepted);
  }

  /** Starts sending `perSecond` requests/s (10 ms ticks) until stop(); at most `maxMs`. */
  start(perSecond: number, maxMs = 600_000): void {
    this.#stop = false;
    this.#loop = (async () => {
      const t0 = performance.now();
      let due0 = 0;
      for (let i = 0; i < 1_000_000 && !this.#stop; i++) {
        const elapsed = performance.now() - t0;
        if (elapsed > maxMs) break;
        const due = Math.floor((elapsed / 1000) * perSecond) - due0;
        // Bounded: never more than 2 000 requests in flight (a stalled server must not grow us).
        for (let j = 0; j < due && this.#pending.size < 2000; j++) {
          const p = this.#one().finally(() => this.#pending.delete(p));
          this.#pending.add(p);
        }
        due0 += due;
        await sleep(10);
      }
    })();
  }

  async stop(): Promise<void> {
    this.#stop = true;
    await this.#loop;
    await Promise.all(this.#pending);
  }

  resetLatency(): void {
    this.latency = new Samples();
  }

  async close(): Promise<void> {
    await this.#agent.close();
  }
}

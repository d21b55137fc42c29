/**
 * Provider traffic for the lab: signed GitHub deliveries at a steady rate to the ingest port (two
 * ingest processes share it with SO_REUSEPORT), each with a unique X-GitHub-Delivery, which Spillway
 * uses as the event id and the sink sees as webhook-id. Every answer is recorded per second of the
 * run, so the lab can say when acceptance recovered after a fault. No client retries: an event
 * without a 2xx is not Spillway's to deliver.
 */
import { randomBytes } from 'node:crypto';
import type { Source } from '@spillway/shared';
import { Agent, request } from 'undici';
import { eventBody, signGithub } from '../bench/lib/spillway.ts';
import { sleep } from '../helpers/wait.ts';

export interface Second {
  sent: number;
  accepted: number;
  s503: number;
  errors: number;
}

export class Load {
  readonly tag: string;
  readonly accepted = new Set<string>();
  readonly seconds: Second[] = [];
  readonly t0 = performance.now();
  sent = 0;
  s503 = 0;
  errors = 0;
  #stop = false;
  #loop: Promise<void> | undefined;
  readonly #pending = new Set<Promise<void>>();
  readonly #agent = new Agent({ connections: 64, headersTimeout: 15_000, bodyTimeout: 15_000 });

  readonly port: number;
  readonly source: Source;

  constructor(port: number, source: Source, label: string) {
    this.port = port;
    this.source = source;
    this.tag = `${label}-${randomBytes(2).toString('hex')}`;
  }

  /** Seconds since this load was created. */
  now(): number {
    return (performance.now() - this.t0) / 1000;
  }

  #bucket(): Second {
    const s = Math.floor(this.now());
    while (this.seconds.length <= s) this.seconds.push({ sent: 0, accepted: 0, s503: 0, errors: 0 });
    return this.seconds[s]!;
  }

  async #one(): Promise<void> {
    const id = `${this.tag}-${++this.sent}`;
    const body = eventBody(512);
    this.#bucket().sent++;
    try {
      const res = await request(`http://127.0.0.1:${this.port}/ingest/${this.source.id}`, {
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
      const b = this.#bucket();
      if (res.statusCode >= 200 && res.statusCode < 300) {
        this.accepted.add(id);
        b.accepted++;
      } else if (res.statusCode === 503) {
        this.s503++;
        b.s503++;
      } else {
        this.errors++;
        b.errors++;
      }
    } catch {
      this.errors++;
      this.#bucket().errors++;
    }
  }

  /** Sends `perSecond` requests/s (10 ms ticks) until stop(), at most `maxMs`, ≤ 2 000 in flight. */
  start(perSecond: number, maxMs = 900_000): void {
    this.#loop = (async () => {
      const t0 = performance.now();
      let done = 0;
      for (let i = 0; i < 10_000_000 && !this.#stop; i++) {
        const elapsed = performance.now() - t0;
        if (elapsed > maxMs) break;
        const due = Math.floor((elapsed / 1000) * perSecond) - done;
        for (let j = 0; j < due && this.#pending.size < 2000; j++) {
          const p = this.#one().finally(() => this.#pending.delete(p));
          this.#pending.add(p);
        }
        done += due;
        await sleep(10);
      }
    })();
  }

  async stop(): Promise<void> {
    this.#stop = true;
    await this.#loop;
    await Promise.all(this.#pending);
    await this.#agent.close();
  }

  /**
   * Seconds from `fromSecond` until acceptance is back: the first second from which three in a row
   * accept at least 90 % of what was sent in them. Undefined if it never came back.
   */
  recoveredAfter(fromSecond: number): number | undefined {
    const s = this.seconds;
    for (let i = Math.floor(fromSecond); i + 2 < s.length; i++) {
      const ok = [0, 1, 2].every((k) => s[i + k]!.sent > 0 && s[i + k]!.accepted >= 0.9 * s[i + k]!.sent);
      if (ok) return Math.max(0, i - fromSecond);
    }
    return undefined;
  }
}

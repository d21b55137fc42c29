/**
 * Provider traffic for the lab: signed GitHub deliveries at a steady rate to the ingest port (two
 * ingest processes share it with SO_REUSEPORT), each with a unique X-GitHub-Delivery, which Spillway
 * uses as the event id and the sink sees as webhook-id. Every answer is recorded per second of the
 * run, so the lab can say when acceptance recovered after a fault. No client retries: an event
 * without a 2xx is not Spillway's to deliver.
 */
import { randomBytes } from 'node:crypto';
import type { Source } from '@spillway/shared';
import { LoadGen } from '../chaos/lib/load.ts';

export interface Second {
  sent: number;
  accepted: number;
  s503: number;
  errors: number;
}

/** The chaos runs' LoadGen (512-byte bodies), with every answer also counted per second of the run. */
export class Load extends LoadGen {
  readonly seconds: Second[] = [];
  readonly t0 = performance.now();
  s503 = 0;
  /** Answers neither 2xx nor 503, and requests that got no answer. */
  errors = 0;

  constructor(port: number, source: Source, label: string) {
    super(() => port, source, 512, `${label}-${randomBytes(2).toString('hex')}`);
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

  protected override onSent(): void {
    this.#bucket().sent++;
  }

  protected override onAnswer(key: string, accepted: boolean): void {
    const b = this.#bucket();
    if (accepted) b.accepted++;
    else if (key === '503') {
      this.s503++;
      b.s503++;
    } else {
      this.errors++;
      b.errors++;
    }
  }

  /** Sends `perSecond` requests/s until stop(), at most 15 minutes. */
  override start(perSecond: number, maxMs = 900_000): void {
    super.start(perSecond, maxMs);
  }

  /** Stops sending, waits for the answers, and closes the connections. */
  override async stop(): Promise<void> {
    await super.stop();
    await this.close();
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

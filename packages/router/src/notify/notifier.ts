import { randomBytes } from 'node:crypto';
import { signPayload } from '@spillway/delivery';
import { VERSION } from '@spillway/shared';
import { notificationsTotal } from '../metrics.ts';
import type { Runtime } from '../roles/runtime.ts';

/** What an operator is told about. */
export type NotificationKind = 'endpoint.disabled' | 'dlq.threshold' | 'tenant.quota_exceeded';

export interface Notification {
  kind: NotificationKind;
  tenantId: string;
  /** What it is about (an endpoint id; the tenant for DLQ and quota): one notice per subject per hour. */
  subject: string;
  data: Record<string, unknown>;
}

/** The same notice is sent at most once per subject in this window (a failing endpoint is not a storm). */
const QUIET_MS = 3_600_000;
const TRIES = 3;
const TIMEOUT_MS = 5000;

/**
 * Operator notifications (docs/operations.md, "Endpoint health and notifications"): a log line and
 * `spillway_notifications_total{kind,result}` always, and, with SPILLWAY_NOTIFY_URL, an event POSTed
 * there signed like any delivery (Standard Webhooks headers, SPILLWAY_NOTIFY_SECRET). At most one
 * per kind and subject per hour across every process (a Redis marker that expires). Best-effort:
 * tried TRIES times, never an owner of anything.
 */
export interface NotifierOptions extends Pick<Runtime, 'redis' | 'keys' | 'logger'> {
  /** SPILLWAY_NOTIFY_URL and SPILLWAY_NOTIFY_SECRET; undefined: log line and metric only. */
  target: { url: string; secret: string } | undefined;
}

export class Notifier {
  readonly #o: NotifierOptions;

  constructor(o: NotifierOptions) {
    this.#o = o;
  }

  /** Not awaited by callers; resolves when the notice was sent, skipped or given up. */
  async notify(n: Notification): Promise<void> {
    const { redis, keys, logger, target } = this.#o;
    try {
      const marker = keys.notified(n.tenantId, n.kind, n.subject);
      if ((await redis.set(marker, '1', 'PX', QUIET_MS, 'NX')) !== 'OK') {
        notificationsTotal.inc({ kind: n.kind, result: 'skipped' });
        return;
      }
    } catch {
      // Redis down: notify anyway (a duplicate notice beats a missing one).
    }
    logger.warn(
      { notification: n.kind, tenantId: n.tenantId, ...n.data },
      `operator notification: ${n.kind}`,
    );
    if (!target) {
      notificationsTotal.inc({ kind: n.kind, result: 'logged' });
      return;
    }
    const id = `ntf_${randomBytes(9).toString('base64url')}`;
    const body = Buffer.from(
      JSON.stringify({ type: n.kind, id, tenantId: n.tenantId, at: new Date().toISOString(), data: n.data }),
    );
    for (let i = 1; i <= TRIES; i++) {
      const ts = Math.floor(Date.now() / 1000);
      try {
        const res = await fetch(target.url, {
          method: 'POST',
          headers: {
            'content-type': 'application/json',
            'webhook-id': id,
            'webhook-timestamp': String(ts),
            'webhook-signature': signPayload([target.secret], id, ts, body),
            'spillway-event-type': n.kind,
            'user-agent': `Spillway/${VERSION}`,
          },
          body,
          signal: AbortSignal.timeout(TIMEOUT_MS),
        });
        await res.arrayBuffer().catch(() => {});
        if (res.ok) {
          notificationsTotal.inc({ kind: n.kind, result: 'sent' });
          return;
        }
      } catch {
        // retried below
      }
      if (i < TRIES) await new Promise((r) => setTimeout(r, 500 * i));
    }
    notificationsTotal.inc({ kind: n.kind, result: 'failed' });
    logger.warn(
      { notification: n.kind, tenantId: n.tenantId },
      'operator notification could not be delivered',
    );
  }
}

import { randomBytes } from 'node:crypto';
import { type AttemptOutcome, Dispatcher } from '@spillway/delivery';
import type { Endpoint, Keys, Logger, RedisClient, Tenant } from '@spillway/shared';
import type { AttemptView } from '../history/reader.ts';

/**
 * `POST .../endpoints/:epid/test`: one signed example event sent to the endpoint now, from the
 * admin process, and the attempt answered back (status, latency, the first 1 KiB of the response).
 * It goes through the same dispatcher as every delivery (signing, SSRF guard, the endpoint's
 * timeout and rate) but not through the queues: it is a probe, it is not retried and it is not
 * part of the event log.
 */
export class TestSender {
  readonly #o: { redis: RedisClient; keys: Keys; logger: Logger; allowCidrs: readonly string[] };
  #dispatcher: Dispatcher | undefined;

  constructor(o: { redis: RedisClient; keys: Keys; logger: Logger; allowCidrs: readonly string[] }) {
    this.#o = o;
  }

  async send(tenant: Tenant, endpoint: Endpoint): Promise<AttemptView> {
    this.#dispatcher ??= new Dispatcher({
      redis: this.#o.redis,
      keys: this.#o.keys,
      logger: this.#o.logger,
      allowCidrs: [...this.#o.allowCidrs],
    });
    const id = `test_${randomBytes(9).toString('base64url')}`;
    const now = Date.now();
    const body = Buffer.from(
      JSON.stringify({
        type: 'spillway.test',
        id,
        endpointId: endpoint.id,
        message:
          'A test event from Spillway: if you can read this, the endpoint receives and verifies webhooks.',
        sentAt: new Date(now).toISOString(),
      }),
    );
    const outcome: AttemptOutcome = await this.#dispatcher.dispatch(
      {
        tenantId: tenant.id,
        eventId: id,
        endpointId: endpoint.id,
        attempt: 1,
        event: {
          tenantId: tenant.id,
          id,
          type: 'spillway.test',
          receivedAt: now,
          contentType: 'application/json',
          body,
        },
      },
      tenant,
      endpoint,
    );
    const v: AttemptView = {
      eventId: id,
      endpointId: endpoint.id,
      attempt: 1,
      at: new Date().toISOString(),
      status: outcome.kind === 'delivered' ? 'delivered' : 'failed',
      latencyMs: outcome.kind === 'deferred' ? 0 : Math.round(outcome.durationMs ?? Date.now() - now),
    };
    if ('status' in outcome && outcome.status !== undefined) v.httpStatus = outcome.status;
    if (outcome.kind === 'deferred') v.error = 'breaker_open';
    else if (outcome.kind !== 'delivered') v.error = outcome.error;
    if (outcome.kind !== 'deferred' && outcome.excerpt?.length) v.response = outcome.excerpt.toString('utf8');
    return v;
  }

  async close(): Promise<void> {
    await this.#dispatcher?.close();
  }
}

import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { type BreakerChangeMessage, CHANNELS } from '@spillway/shared';
import { afterEach, describe, expect, it } from 'vitest';
import { waitFor } from '../../../test/helpers/wait.ts';
import { AttemptFailure, Breakers } from '../src/breakers.ts';

const seen: BreakerChangeMessage[] = [];
const onMessage = (m: unknown) => seen.push(m as BreakerChangeMessage);
let breakers: Breakers | undefined;
afterEach(() => {
  unsubscribe(CHANNELS.breakerChange, onMessage);
  breakers?.close();
  seen.length = 0;
});

describe('spillway:delivery:breaker-change', () => {
  it('publishes every breaker transition with the tenant and endpoint', async () => {
    subscribe(CHANNELS.breakerChange, onMessage);
    breakers = new Breakers({ volumeThreshold: 10, errorThresholdPercentage: 50, resetTimeoutMs: 50 });
    const e = breakers.get('acme', 'ep1');
    const fail = () => Promise.reject(new AttemptFailure('503', true, undefined));
    for (let i = 0; i < 10; i++) await e.breaker.fire(fail).catch(() => {});
    expect(seen).toEqual([{ tenantId: 'acme', endpointId: 'ep1', state: 'open' }]);
    // The reset timer half-opens the breaker; the probe then closes it.
    await waitFor(() => seen.length === 2, 'the half-open transition', 5_000, 10);
    await e.breaker.fire(() => Promise.resolve('ok'));
    expect(seen.map((m) => m.state)).toEqual(['open', 'half-open', 'closed']);
  });
});

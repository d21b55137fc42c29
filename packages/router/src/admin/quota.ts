import { type Config, errors, type Keys, type Logger, type RedisClient, type Tenant } from '@spillway/shared';
import { withCommands } from '../commands/index.ts';
import { eventsApiRefusedTotal } from '../metrics.ts';

/**
 * What the events API admits per tenant (`POST /v1/tenants/:tid/events`). Every accepted event
 * leaves Redis keys under `noeviction`, so one tenant must not be able to post without bound:
 *   - a rate (`limits.eventRate`, default SPILLWAY_TENANT_EVENT_RATE): a token bucket on the Redis
 *     clock (`keys.rate(tid, 'events')`), shared by every admin process;
 *   - a quota per UTC day (`limits.eventsPerDay`, default SPILLWAY_TENANT_EVENTS_PER_DAY): one
 *     counter per tenant and day (`keys.eventQuota`), expiring a day after its day ends.
 * Both are decided in one atomic call (commands/events-admit-2.lua: one round trip, exact across
 * processes, and a request refused for one spends nothing of the other). Past either the answer is
 * 429 with Retry-After (the rate: when a token is due; the quota: the next UTC midnight). An event
 * that turns out to be a duplicate, or that the intake could not take, is given back to the quota.
 */
export interface EventAdmission {
  /** Admits one event of `tenant` or throws SPW_ERR_RATE_LIMITED (429, Retry-After). */
  admit(tenant: Tenant, nowMs?: number): Promise<Admitted>;
}

export interface Admitted {
  /** Gives the event back to the day's quota (a duplicate, or the intake failed). */
  refund(): Promise<void>;
}

const DAY_MS = 86_400_000;
/** A refusal is logged once per tenant, reason and day; bounded (cleared past this many). */
const LOGGED_MAX = 10_000;

/** `YYYYMMDD` of a UTC day. */
export function utcDay(ms: number): string {
  return new Date(ms).toISOString().slice(0, 10).replaceAll('-', '');
}

export function createEventAdmission(deps: {
  redis: RedisClient;
  keys: Keys;
  config: Pick<Config, 'tenantEventsPerDay' | 'tenantEventRate'>;
  logger: Logger;
  /** Told when a tenant is refused for its daily quota (the operator notification). */
  onQuotaExceeded?: (tenantId: string, quota: number) => void;
}): EventAdmission {
  const redis = withCommands(deps.redis);
  const logged = new Map<string, string>();

  const refuse = (tenant: Tenant, reason: 'rate' | 'quota', message: string, retryAfterS: number) => {
    eventsApiRefusedTotal.inc({ reason });
    const day = utcDay(Date.now());
    if (logged.get(`${reason}:${tenant.id}`) !== day) {
      if (logged.size >= LOGGED_MAX) logged.clear();
      logged.set(`${reason}:${tenant.id}`, day);
      deps.logger.warn({ tenantId: tenant.id, reason }, `events API: ${message}`);
    }
    return errors.rateLimited(message, { retryAfter: retryAfterS });
  };

  return {
    async admit(tenant, nowMs = Date.now()) {
      const rate = tenant.limits.eventRate ?? deps.config.tenantEventRate;
      const quota = tenant.limits.eventsPerDay ?? deps.config.tenantEventsPerDay;
      const nextMidnight = (Math.floor(nowMs / DAY_MS) + 1) * DAY_MS;
      const counter = deps.keys.eventQuota(tenant.id, utcDay(nowMs));
      const [verdict, n] = await redis.eventsAdmit(
        deps.keys.rate(tenant.id, 'events'),
        counter,
        rate ? String(rate.perSecond) : '',
        rate ? String(rate.burst) : '1',
        quota === undefined ? '' : String(quota),
        // The counter outlives its day by one day: long enough to be read, never forever.
        String(nextMidnight - nowMs + DAY_MS),
      );
      if (verdict === 0)
        throw refuse(
          tenant,
          'rate',
          `tenant ${tenant.id} is over its events rate (${rate?.perSecond}/s, burst ${rate?.burst})`,
          Math.max(1, Math.ceil(n / 1000)),
        );
      if (verdict < 0 && quota !== undefined) deps.onQuotaExceeded?.(tenant.id, quota);
      if (verdict < 0)
        throw refuse(
          tenant,
          'quota',
          `tenant ${tenant.id} has used its quota of ${quota} events for today (UTC)`,
          Math.max(1, Math.ceil((nextMidnight - nowMs) / 1000)),
        );
      return {
        refund: async () => {
          if (quota !== undefined) await redis.quotaRefund(counter);
        },
      };
    },
  };
}

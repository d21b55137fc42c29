import { defineCommands, type RedisClient } from '@spillway/shared';

/**
 * The router's Lua scripts (this folder, named by the `<name>-<numkeys>.lua` rule of
 * `defineCommands` in @spillway/shared). Numeric results become errors in exactly one place: the
 * caller of each command.
 */
const SCRIPTS = [
  'config-rev-2',
  'config-swap-1',
  'dedup-release-1',
  'dedup-reserve-1',
  'dedup-promote-1',
  'dlq-push-1',
  'dlq-remove-1',
  'fetch-settle-3',
  'history-index-3',
  'job-promoted-1',
  'events-admit-2',
  'quota-refund-1',
  'ord-accept-2n',
  'ord-fanout-2n',
  'ord-step-5',
  'ord-tenant-1',
] as const;

export interface RouterCommands {
  configRev(tenantKey: string, revKey: string, rev: string): Promise<number>;
  configSwap(key: string, field: string, expected: string, next: string): Promise<number>;
  dedupRelease(key: string, marker: string): Promise<number>;
  dedupReserve(base: string, ...args: (string | number)[]): Promise<(string | number)[]>;
  dedupPromote(base: string, ...args: (string | number)[]): Promise<number>;
  dlqPush(key: string, cap: number, entry: string): Promise<number>;
  dlqRemove(key: string, ...entries: string[]): Promise<number>;
  fetchSettle(wait: string, prioritized: string, marker: string): Promise<number>;
  jobPromoted(jobKey: string): Promise<number>;
  historyIndex(
    idBase: string,
    events: string,
    attempts: string,
    ...args: (string | number | Buffer)[]
  ): Promise<number>;
  eventsAdmit(
    bucket: string,
    counter: string,
    rate: string,
    burst: string,
    quota: string,
    ttlMs: string,
  ): Promise<[number, number]>;
  quotaRefund(key: string): Promise<number>;
  ordAccept(numKeys: number, ...keysThenArgs: (string | number)[]): Promise<number>;
  ordFanout(numKeys: number, ...keysThenArgs: (string | number)[]): Promise<number>;
  ordStep(...keysThenArgs: (string | number)[]): Promise<(string | number)[]>;
  ordTenant(key: string, tenantId: string, observed: string, next: string): Promise<number>;
}

/** The same commands queued on a pipeline (ioredis adds custom commands to pipelines too). */
export type PipeCommands = {
  [K in keyof RouterCommands]: (...args: Parameters<RouterCommands[K]>) => unknown;
};

const loaded = new WeakSet<object>();

export function withCommands(redis: RedisClient): RedisClient & RouterCommands {
  if (loaded.has(redis)) return redis as RedisClient & RouterCommands;
  loaded.add(redis);
  return defineCommands<RouterCommands>(redis, new URL('./', import.meta.url), SCRIPTS);
}

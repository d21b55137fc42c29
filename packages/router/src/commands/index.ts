import { defineCommands, type RedisClient } from '@spillway/shared';

/**
 * The router's Lua scripts (this folder, named by the `<name>-<numkeys>.lua` rule of
 * `defineCommands` in @spillway/shared). Numeric results become errors in exactly one place: the
 * caller of each command.
 */
const SCRIPTS = [
  'dedup-release-1',
  'dlq-remove-1',
  'dedup-reserve-1n',
  'events-accept-2n',
  'events-fanout-2n',
] as const;

export interface RouterCommands {
  dedupRelease(key: string, marker: string): Promise<number>;
  dlqRemove(key: string, ...entries: string[]): Promise<number>;
  dedupReserve(numKeys: number, ...keysThenArgs: (string | number)[]): Promise<(string | number)[]>;
  eventsAccept(numKeys: number, ...keysThenArgs: (string | number)[]): Promise<number>;
  eventsFanout(numKeys: number, ...keysThenArgs: (string | number)[]): Promise<number>;
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

import { readFileSync } from 'node:fs';
import type { RedisClient } from '@spillway/shared';

/**
 * Loads the router's Lua scripts (commands/<name>-<numkeys>.lua) onto a connection as ioredis
 * custom commands. Numeric results become errors in exactly one place: the caller of each command.
 * `<name>-n.lua` takes a variable number of keys: the caller passes the count first
 * (`dedupReserve(keys.length, ...keys, ...argv)`); every key of one call shares one tenant's hash tag.
 */
const SCRIPTS = ['dedup-release-1', 'dlq-remove-1', 'dedup-reserve-n', 'events-accept-n'] as const;

export interface RouterCommands {
  dedupRelease(key: string, marker: string): Promise<number>;
  dlqRemove(key: string, ...entries: string[]): Promise<number>;
  dedupReserve(numKeys: number, ...keysThenArgs: (string | number)[]): Promise<(string | number)[]>;
  eventsAccept(numKeys: number, ...keysThenArgs: (string | number)[]): Promise<number>;
}

/** The same commands queued on a pipeline (ioredis adds custom commands to pipelines too). */
export type PipeCommands = {
  [K in keyof RouterCommands]: (...args: Parameters<RouterCommands[K]>) => unknown;
};

const camel = (name: string) =>
  name.replace(/-(\d+|n)$/, '').replace(/-(\w)/g, (_m, c: string) => c.toUpperCase());

const loaded = new WeakSet<object>();

export function withCommands(redis: RedisClient): RedisClient & RouterCommands {
  const r = redis as RedisClient & Partial<RouterCommands>;
  if (loaded.has(r)) return r as RedisClient & RouterCommands;
  loaded.add(r);
  for (const file of SCRIPTS) {
    const name = camel(file);
    if ((r as unknown as Record<string, unknown>)[name]) continue;
    const n = /-(\d+|n)$/.exec(file)![1]!;
    const lua = readFileSync(new URL(`./${file}.lua`, import.meta.url), 'utf8');
    if (n === 'n') r.defineCommand(name, { lua });
    else r.defineCommand(name, { numberOfKeys: Number(n), lua });
  }
  return r as RedisClient & RouterCommands;
}

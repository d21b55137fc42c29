import { readFileSync } from 'node:fs';
import type { RedisClient } from '@spillway/shared';

/**
 * Loads the router's Lua scripts (commands/<name>-<numkeys>.lua) onto a connection as ioredis
 * custom commands. Numeric results become errors in exactly one place: the caller of each command.
 */
const SCRIPTS = ['dedup-release-1', 'dlq-remove-1'] as const;

export interface RouterCommands {
  dedupRelease(key: string, marker: string): Promise<number>;
  dlqRemove(key: string, ...entries: string[]): Promise<number>;
}

const camel = (name: string) =>
  name.replace(/-\d+$/, '').replace(/-(\w)/g, (_m, c: string) => c.toUpperCase());

export function withCommands(redis: RedisClient): RedisClient & RouterCommands {
  const r = redis as RedisClient & Partial<RouterCommands>;
  for (const file of SCRIPTS) {
    const name = camel(file);
    if ((r as unknown as Record<string, unknown>)[name]) continue;
    const numberOfKeys = Number(/-(\d+)$/.exec(file)![1]);
    const lua = readFileSync(new URL(`./${file}.lua`, import.meta.url), 'utf8');
    r.defineCommand(name, { numberOfKeys, lua });
  }
  return r as RedisClient & RouterCommands;
}

import { readFileSync } from 'node:fs';
import type { RedisClient } from './redis.ts';

/**
 * Loads Redis Lua scripts onto a connection as ioredis custom commands (run with EVALSHA; ioredis
 * reloads a script after NOSCRIPT, i.e. after a Redis restart or FLUSH).
 *
 * File names follow one rule, `<name>-<numkeys>.lua`, and `<numkeys>` is either
 *   - `<k>`:  the script takes exactly k KEYS (`dedup-release-1.lua`, `lease-1.lua`), called as
 *             `redis.dedupRelease(key, ...argv)`; or
 *   - `<k>n`: the script takes k KEYS per item for any number of items (`ord-fanout-2n.lua`: two
 *             keys per item), called with the KEYS count first:
 *             `redis.ordFanout(keys.length, ...keys, ...argv)`.
 * The command is the camel-cased `<name>` (`dedup-reserve` → `dedupReserve`). Each script opens with
 * a header stating its KEYS, ARGV and return values. On Redis Cluster every key of one call must
 * share one hash tag (one tenant's `{t:<tenant>}`). A line `--@include fingerprints.lua` (any file of `packages/shared/src/lua/`) pastes
 * that file of shared helpers there.
 */
export function defineCommands<C>(redis: RedisClient, dir: URL, files: readonly string[]): RedisClient & C {
  const r = redis as unknown as Record<string, unknown> & {
    defineCommand(name: string, def: { numberOfKeys?: number; lua: string }): void;
  };
  for (const file of files) {
    const { command, numberOfKeys } = parseScriptName(file);
    if (typeof r[command] === 'function') continue;
    const lua = readLua(new URL(`./${file}.lua`, dir));
    r.defineCommand(command, numberOfKeys === undefined ? { lua } : { numberOfKeys, lua });
  }
  return redis as RedisClient & C;
}

/** `ord-fanout-2n` → ordFanout with keys counted by the caller; `lease-1` → lease with 1 key. */
export function parseScriptName(file: string): { command: string; numberOfKeys: number | undefined } {
  const m = /^([a-z][a-z0-9-]*)-(\d+)(n?)$/.exec(file);
  if (!m)
    throw new Error(`Lua script "${file}" must be named <name>-<numkeys>.lua (e.g. lease-1, ord-fanout-2n)`);
  const command = m[1]!.replace(/-(\w)/g, (_m, c: string) => c.toUpperCase());
  return { command, numberOfKeys: m[3] ? undefined : Number(m[2]) };
}

const texts = new Map<string, string>();
/** Lua helpers shared by every package's scripts (`--@include <file>.lua`). */
const LUA_LIB = new URL('./lua/', import.meta.url);
/**
 * A script's text, with each `--@include <file>.lua` line replaced by that file from
 * `packages/shared/src/lua/`: Lua helpers several scripts share (the router's dedup and history
 * scripts, ingest's body claims) live in one file there, not in each script or package.
 */
function readLua(url: URL): string {
  let lua = texts.get(url.href);
  if (lua === undefined) {
    lua = readFileSync(url, 'utf8').replace(/^--@include (\S+\.lua)\s*$/gm, (_l, file: string) =>
      readLua(new URL(file, LUA_LIB)),
    );
    texts.set(url.href, lua);
  }
  return lua;
}

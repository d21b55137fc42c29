import { type Role, type Started, start } from '@spillway/router/testing';
import { createKeys, type Keys } from '@spillway/shared';
import { Redis } from 'ioredis';
import { testEnv } from './env.ts';
import { spawnSpillway } from './spawn.ts';

/** A real `start(role)` on the suite's Redis and Kafka, with what the admin tests reach for. */
export interface StartedRouter {
  s: Started;
  env: Record<string, string>;
  /** http://127.0.0.1:<admin port> */
  base: string;
  /** A connection of the test's own (not the router's). */
  redis: Redis;
  keys: Keys;
  close(): Promise<void>;
}

export async function startRouter(
  role: Role,
  overrides: Record<string, string> = {},
): Promise<StartedRouter> {
  const env = testEnv(overrides);
  const s = await start(role, env);
  const redis = new Redis(env.SPILLWAY_REDIS_URL!);
  return {
    s,
    env,
    base: `http://127.0.0.1:${s.adminPort}`,
    redis,
    keys: createKeys(env.SPILLWAY_PREFIX!),
    async close() {
      await s.close();
      redis.disconnect();
    },
  };
}

/** An answer of the admin API: its status and parsed JSON body (undefined when empty). */
export interface AdminAnswer {
  status: number;
  // biome-ignore lint/suspicious/noExplicitAny: tests read whatever JSON the route answered
  body: any;
}

/** Calls the router's admin API with its admin token (or `token`). */
export function adminCall(r: StartedRouter, token?: string) {
  return async (
    method: string,
    path: string,
    body?: unknown,
    headers: Record<string, string> = {},
  ): Promise<AdminAnswer> => {
    const h: Record<string, string> = {
      authorization: `Bearer ${token ?? r.env.SPILLWAY_ADMIN_TOKEN}`,
      ...headers,
    };
    if (body !== undefined) h['content-type'] = 'application/json';
    const res = await fetch(r.base + path, {
      method,
      headers: h,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    return { status: res.status, body: text ? JSON.parse(text) : undefined };
  };
}

/** Runs the `spillway` CLI against the router's admin API (its admin token). */
export async function adminCli(
  r: StartedRouter,
  args: string[],
): Promise<{ code: number | null; out: string; err: string }> {
  const p = spawnSpillway(args, {
    SPILLWAY_ADMIN_URL: r.base,
    SPILLWAY_ADMIN_TOKEN: r.env.SPILLWAY_ADMIN_TOKEN!,
  });
  const code = await p.exited;
  return { code, out: p.stdout(), err: p.stderr() };
}

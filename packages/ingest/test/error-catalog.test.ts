/**
 * One error catalog (packages/shared/src/errors.ts): the io_uring addon answers some errors itself
 * in C (native/src/core/ring.c `api_code()`, framing errors and timeouts decided on the ring). Every
 * status → code pair of that table, its default included, must be an entry of the catalog, so a
 * client reads the same `{"error":{"code"}}` whichever side of the addon refused it.
 */
import { readFileSync } from 'node:fs';
import { errors } from '@spillway/shared';
import { describe, expect, it } from 'vitest';
import { errorResponse } from '../src/errors.ts';

const ring = readFileSync(new URL('../native/src/core/ring.c', import.meta.url), 'utf8');

/** The pairs of `static const char *api_code(int status) { switch ... }`, `default` as status 0. */
function cTable(): { status: number; code: string }[] {
  const fn = /static const char \*api_code\(int status\) \{([\s\S]*?)\n\}/.exec(ring)?.[1];
  if (!fn) throw new Error('api_code() not found in ring.c');
  const pairs = [...fn.matchAll(/case (\d+): return "([a-z_]+)";/g)].map((m) => ({
    status: Number(m[1]),
    code: m[2]!,
  }));
  const def = /default: return "([a-z_]+)";/.exec(fn)?.[1];
  if (def) pairs.push({ status: 0, code: def });
  return pairs;
}

const catalog = Object.values(errors).map((make) => make('x'));

describe('the C status table against the shared catalog', () => {
  it('parses the table', () => {
    expect(cTable().length).toBeGreaterThanOrEqual(7);
  });

  it.each(cTable())('$status → $code is a catalog entry', ({ status, code }) => {
    const entry = catalog.find((e) => e.apiCode === code);
    expect(entry, `${code} is not in the catalog`).toBeDefined();
    // The default (any other 4xx the parser refuses) is the generic 400.
    expect(entry!.status).toBe(status === 0 ? 400 : status);
  });

  it('the statuses ring.c answers natively all have an entry', () => {
    const statuses = new Set(
      [
        ...ring.matchAll(/reply_error\(s, c, (\d{3}),/g),
        ...ring.matchAll(/case [A-Z_]+: return (\d{3});/g),
      ].map((m) => Number(m[1])),
    );
    expect(statuses.size).toBeGreaterThan(3);
    const codes = new Map(cTable().map((p) => [p.status, p.code]));
    for (const s of statuses) {
      const code = codes.get(s) ?? codes.get(0)!;
      expect(catalog.find((e) => e.apiCode === code && e.status === (codes.has(s) ? s : 400))).toBeDefined();
    }
  });

  it('errorResponse is the catalog answer, with Retry-After and extra headers', () => {
    expect(errorResponse(errors.unavailable('busy', { retryAfter: 2 }), { close: true })).toEqual({
      status: 503,
      headers: { 'retry-after': '2' },
      body: { error: { code: 'unavailable', message: 'busy' } },
      close: true,
    });
    expect(errorResponse(errors.methodNotAllowed('use POST'), { headers: { allow: 'POST' } })).toEqual({
      status: 405,
      headers: { allow: 'POST' },
      body: { error: { code: 'method_not_allowed', message: 'use POST' } },
    });
    // Not a catalog error: internal, its message hidden.
    expect(errorResponse(new Error('secret detail')).body).toEqual({
      error: { code: 'internal', message: 'internal error' },
    });
  });
});

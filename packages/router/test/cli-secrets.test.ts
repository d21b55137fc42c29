import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { secretKeyId } from '@spillway/shared';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type StartedRouter, startRouter } from '../../../test/helpers/router-started.ts';
import { spawnSpillway } from '../../../test/helpers/spawn.ts';

/**
 * The `spillway` CLI (a subprocess) reading secrets and the admin token from stdin or a file,
 * never only from argv, and its secret commands: endpoints/sources secret, rotate-secret, sources
 * patch, secrets reencrypt. The admin API is a real `start('admin')` in this process.
 */
let r: StartedRouter;
let dir: string;

beforeAll(async () => {
  r = await startRouter('admin');
  dir = mkdtempSync(join(tmpdir(), 'spw-cli-secrets-'));
}, 30_000);
afterAll(async () => {
  await r?.close();
  rmSync(dir, { recursive: true, force: true });
});

/** The CLI without SPILLWAY_ADMIN_TOKEN in its environment unless `withEnvToken`. */
async function cli(args: string[], opts: { stdin?: string; withEnvToken?: boolean } = {}) {
  const env: Record<string, string> = { SPILLWAY_ADMIN_URL: r.base };
  if (opts.withEnvToken !== false) env.SPILLWAY_ADMIN_TOKEN = r.env.SPILLWAY_ADMIN_TOKEN!;
  const p = spawnSpillway(args, env, opts.stdin === undefined ? {} : { stdin: opts.stdin });
  const code = await p.exited;
  return { code, out: p.stdout(), err: p.stderr() };
}

async function ok(args: string[], opts: { stdin?: string; withEnvToken?: boolean } = {}) {
  const res = await cli(args, opts);
  expect(res.code, `${args.join(' ')}: ${res.err}`).toBe(0);
  return res;
}

const file = (name: string, text: string) => {
  const path = join(dir, name);
  writeFileSync(path, text, { mode: 0o600 });
  return path;
};

describe('spillway CLI: secrets and token from stdin or a file', () => {
  const t = `cs-${randomBytes(3).toString('hex')}`;

  it('the admin token from --token-file, --token-file - and --token -', async () => {
    const token = r.env.SPILLWAY_ADMIN_TOKEN!;
    const tokenFile = file('token', `${token}\n`);
    const created = await ok(
      [
        '--token-file',
        tokenFile,
        '--json',
        'tenants',
        'create',
        t,
        '--events-per-day',
        '50',
        '--event-rate',
        '10:20',
      ],
      { withEnvToken: false },
    );
    expect(JSON.parse(created.out).limits).toMatchObject({
      eventsPerDay: 50,
      eventRate: { perSecond: 10, burst: 20 },
    });
    expect(
      (await ok(['--token-file', '-', 'tenants', 'get', t], { stdin: token, withEnvToken: false })).out,
    ).toContain(t);
    expect(
      (await ok(['--token', '-', 'tenants', 'get', t], { stdin: `${token}\r\n`, withEnvToken: false })).out,
    ).toContain(t);
    const bad = await cli(['--token-file', join(dir, 'missing'), 'tenants', 'list'], { withEnvToken: false });
    expect(bad.code).toBe(1);
    expect(bad.err.trim().split('\n')).toHaveLength(1);
    expect(bad.err).toContain('--token-file');
  });

  it('history commands take the token from --token-file and --token - too', async () => {
    // history.ts once built its own client from --token alone: --token-file was ignored and the
    // command failed for want of SPILLWAY_ADMIN_TOKEN.
    const token = r.env.SPILLWAY_ADMIN_TOKEN!;
    const th = `${t}-h`;
    await ok(['tenants', 'create', th]);
    const listed = await ok(
      ['--token-file', file('token-history', `${token}\n`), '--json', 'events', 'list', th],
      {
        withEnvToken: false,
      },
    );
    expect(JSON.parse(listed.out)).toMatchObject({ data: [] });
    expect(
      (
        await ok(['--token', '-', '--json', 'events', 'list', th, '--all'], {
          stdin: token,
          withEnvToken: false,
        })
      ).out,
    ).toContain('"data"');
  });

  it('endpoint secrets: create from a file, hidden in get, shown by `endpoints secret`, rotated from stdin', async () => {
    const secret = `whsec_${randomBytes(32).toString('base64')}`;
    const e = JSON.parse(
      (
        await ok([
          '--json',
          'endpoints',
          'create',
          t,
          'https://example.com/h',
          '--id',
          'e1',
          '--secret-file',
          file('ep-secret', `${secret}\n`),
        ])
      ).out,
    );
    expect(e.secret).toBe(secret);
    const shown = await ok(['endpoints', 'get', t, 'e1']);
    expect(shown.out).toContain('https://example.com/h');
    expect(shown.out).not.toContain(secret.slice(6));
    expect((await ok(['endpoints', 'secret', t, 'e1'])).out).toBe(`${secret}\n`);

    const next = `whsec_${randomBytes(32).toString('base64')}`;
    expect((await ok(['endpoints', 'rotate-secret', t, 'e1', '--secret', '-'], { stdin: next })).out).toBe(
      `${next}\n`,
    );
    const after = await ok(['endpoints', 'secret', t, 'e1']);
    expect(after.out).toBe(`${next}\n`);
    expect(after.err).toContain(`previous (live until`);
    expect(after.err).toContain(secret);
    // Without --secret a fresh one is generated and printed once.
    const generated = (await ok(['endpoints', 'rotate-secret', t, 'e1'])).out.trim();
    expect(generated).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
    expect((await ok(['endpoints', 'secret', t, 'e1'])).out.trim()).toBe(generated);
  });

  it('source secrets: create from stdin, patch, rotate-secret from a file with an overlap, secret', async () => {
    const sid = `${t}-gh`;
    const src = JSON.parse(
      (
        await ok(['--json', 'sources', 'create', t, '--kind', 'github', '--id', sid, '--secret-file', '-'], {
          stdin: 'gh-first\n',
        })
      ).out,
    );
    expect(src).toMatchObject({ id: sid, secret: 'gh-first' });
    expect((await ok(['sources', 'secret', t, sid])).out).toBe('gh-first\n');
    expect((await ok(['sources', 'get', t, sid])).out).not.toContain('gh-first');

    const patched = JSON.parse(
      (
        await ok([
          '--json',
          'sources',
          'patch',
          t,
          sid,
          '--allow-cidrs',
          '10.0.0.0/8',
          '--max-body-bytes',
          '2048',
          '--rate-per-second',
          '5',
        ])
      ).out,
    );
    expect(patched).toMatchObject({
      allowCidrs: ['10.0.0.0/8'],
      maxBodyBytes: 2048,
      rate: { perSecond: 5, burst: 5 },
    });
    const cleared = JSON.parse(
      (await ok(['--json', 'sources', 'patch', t, sid, '--any-address', '--remove-rate'])).out,
    );
    expect(cleared.allowCidrs).toBeUndefined();
    expect(cleared.rate).toBeUndefined();
    expect((await cli(['sources', 'patch', t, sid])).code).toBe(1);

    const rotated = await ok([
      'sources',
      'rotate-secret',
      t,
      sid,
      '--secret-file',
      file('gh-second', 'gh-second\n'),
      '--overlap',
      '1h',
    ]);
    expect(rotated.out).toMatch(/previous secret verifies until \S+/);
    const view = JSON.parse((await ok(['--json', 'sources', 'secret', t, sid])).out);
    expect(view.secret).toBe('gh-second');
    expect(view.previousSecrets).toEqual([{ secret: 'gh-first', expiresAt: expect.any(String) }]);
    const left = Date.parse(view.previousSecrets[0].expiresAt) - Date.now();
    expect(left).toBeGreaterThan(3_500_000);
    expect(left).toBeLessThanOrEqual(3_600_000);
  });

  it('refuses ambiguous or missing secret input with one line', async () => {
    for (const [args, mention, stdin] of [
      [
        ['sources', 'create', t, '--kind', 'github', '--secret', 'a', '--secret-file', file('x', 'b')],
        'not both',
      ],
      [['sources', 'create', t, '--kind', 'github'], '--secret'],
      [['sources', 'create', t, '--kind', 'github', '--secret-file', file('empty', '\n')], 'empty'],
      [['--token', '-', 'sources', 'create', t, '--kind', 'github', '--secret', '-'], 'already read', 'x'],
      [['sources', 'rotate-secret', t, 'whatever'], '--secret'],
    ] as [string[], string, string?][]) {
      const res = await cli(args, stdin === undefined ? {} : { stdin });
      expect(res.code, args.join(' ')).toBe(1);
      expect(res.err.trim().split('\n'), args.join(' ')).toHaveLength(1);
      expect(res.err).toContain(mention);
    }
    expect((await ok(['--json', 'sources', 'list', t])).out).not.toContain('"b"');
  });

  it('`secrets reencrypt` reports what it did under the current key', async () => {
    const kid = secretKeyId(Buffer.from(r.env.SPILLWAY_SECRET_KEY!, 'base64'));
    const res = await ok(['secrets', 'reencrypt']);
    expect(res.out).toMatch(
      new RegExp(`^re-encrypted under key ${kid}: 0 of \\d+ endpoints, 0 of \\d+ sources\\n$`),
    );
    const json = JSON.parse((await ok(['--json', 'secrets', 'reencrypt'])).out);
    expect(json).toMatchObject({ keyId: kid, failed: [] });
  });
});

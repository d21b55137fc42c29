/**
 * The C verifier (native/src/core/verify.c, for the io_uring ring thread) against the JS verifiers
 * (src/verify/, what both backends use today): 10 000 generated requests — valid (signed by the
 * providers' own libraries), tampered, wrong secret, stale and boundary timestamps, malformed,
 * padded and reordered headers, rotated-secret candidate lists, latin1 header bytes, empty and
 * large bodies — answered by the JS verifiers, then by the C verifier under ASan + UBSan with the
 * body fed in random pieces. Every outcome must agree.
 */
import { spawnSync } from 'node:child_process';
import { createHmac } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { sign as githubSign } from '@octokit/webhooks-methods';
import {
  parseWhsec,
  type Source,
  WHSEC_MIN_KEY_BYTES,
  WHSEC_SCHEMA_PATTERN,
  whsecProblem,
} from '@spillway/shared';
import { Webhook } from 'standardwebhooks';
import Stripe from 'stripe';
import { afterAll, describe, expect, it } from 'vitest';
import { seededRandom } from '../../../test/helpers/random.ts';
import { prepareVerifier } from '../src/verify/index.ts';

const N = 10_000;
const native = fileURLToPath(new URL('../native/', import.meta.url));
const hasCc = spawnSync('cc', ['--version']).status === 0;
const stripe = new Stripe('sk_test_x');
const KIND = { github: 1, stripe: 2, shopify: 3, standard: 4 } as const;
type Kind = keyof typeof KIND;

const dir = mkdtempSync(join(tmpdir(), 'spw-verify-diff-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

interface Case {
  kind: Kind;
  secret: string;
  headers: Record<string, string>;
  now: number;
  body: Buffer;
}

/** The JS verifiers' answer: 'ok' when the signature matched (a 400 for the body's JSON is not the verifier's concern). */
function jsOutcome(c: Case): string {
  const source = { id: 's', tenantId: 't', kind: c.kind, secret: c.secret, maxBodyBytes: 1 << 30 } as Source;
  const p = prepareVerifier(source, c.headers, c.now);
  if (!p.ok) return p.reason;
  p.verifier.update(c.body);
  const v = p.verifier.finish(c.body);
  return v.ok || v.reason === 'bad_event' ? 'ok' : v.reason;
}

/** Hex of the bytes; `-` for an absent header, `=` for a present but empty one. */
const hex = (s: string | undefined, enc: BufferEncoding = 'latin1') =>
  s === undefined ? '-' : Buffer.from(s, enc).toString('hex') || '=';

function line(c: Case, expected: string, seed: number): string {
  const h = c.headers;
  const [sig, id, ts] =
    c.kind === 'github'
      ? [h['x-hub-signature-256'], undefined, undefined]
      : c.kind === 'stripe'
        ? [h['stripe-signature'], undefined, undefined]
        : c.kind === 'shopify'
          ? [h['x-shopify-hmac-sha256'], undefined, undefined]
          : [h['webhook-signature'], h['webhook-id'], h['webhook-timestamp']];
  // The secret reaches C as UTF-8 (napi strings); header values as the latin1 bytes received.
  return [
    KIND[c.kind],
    hex(c.secret, 'utf8'),
    hex(sig),
    hex(id),
    hex(ts),
    String(c.now),
    c.body.toString('hex') || '=',
    expected,
    String(seed),
  ].join('\t');
}

async function generate(): Promise<string[]> {
  const r = seededRandom(20261201);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(r() * xs.length)]!;
  const int = (lo: number, hi: number) => lo + Math.floor(r() * (hi - lo + 1));
  const junk = (n: number) =>
    Array.from({ length: n }, () =>
      String.fromCharCode(pick([0x20, 0x2c, 0x3d, 0x2b, 0x2f, 0x5f, 0xa0, 0xe9, int(0x21, 0x7e)])),
    ).join('');
  const pad = (s: string) => `${pick(['', ' ', '\t', '\u00a0', '  '])}${s}${pick(['', ' ', '\t', '\u00a0'])}`;
  const flip = (b: Buffer) => {
    if (b.length === 0) return Buffer.from('x');
    const t = Buffer.from(b);
    const i = int(0, t.length - 1);
    t[i] = t[i]! ^ (1 << int(0, 7));
    return t;
  };
  const lines: string[] = [];
  for (let n = 0; n < N; n++) {
    const kind = pick(['github', 'stripe', 'shopify', 'standard'] as const);
    const secret =
      kind === 'stripe' || kind === 'standard'
        ? `whsec_${Buffer.from(Array.from({ length: int(16, 40) }, () => int(0, 255))).toString('base64')}`
        : pick([`s3cret-${n}`, `sécret-${n}-\u{1f680}`, 'x'.repeat(int(1, 100))]);
    const size = pick([0, int(1, 64), int(64, 2000), int(2000, 6000)]);
    const body = Buffer.from(
      r() < 0.5
        ? JSON.stringify({ id: `evt_${n}`, type: 'invoice.paid', pad: 'p'.repeat(size) })
        : Array.from({ length: size }, () => String.fromCharCode(int(0, 255))).join(''),
      'latin1',
    );
    const now = 1_764_000_000_000 + int(0, 10_000_000);
    const t =
      Math.floor(now / 1000) + pick([0, 0, 0, int(-299, 299), -300, 300, -301, 301, int(-5000, 5000)]);
    const mutation = int(0, 9);
    const signBody = mutation === 1 ? flip(body) : body;
    const otherSecret =
      kind === 'stripe' || kind === 'standard'
        ? `whsec_${Buffer.from(Array.from({ length: 24 }, () => int(0, 255))).toString('base64')}`
        : `${secret}x`;
    const signSecret = mutation === 2 ? otherSecret : secret;
    // The providers' libraries sign the UTF-8 of a string: they sign ASCII bodies here; binary
    // bodies are signed over their exact bytes with node:crypto (what a provider's bytes are).
    const ascii = signBody.every((b) => b < 0x80);
    const headers: Record<string, string> = {};
    let caseNow = now;
    if (kind === 'github') {
      let sig =
        ascii && signBody.length > 0
          ? await githubSign(signSecret, signBody.toString('utf8'))
          : `sha256=${createHmac('sha256', signSecret).update(signBody).digest('hex')}`;
      if (mutation === 3) sig = sig.toUpperCase().replace('SHA256=', 'sha256=');
      if (mutation === 4) sig = pad(sig);
      if (mutation === 5) sig = sig.slice(0, int(0, sig.length - 1));
      if (mutation === 6) sig = junk(int(0, 80));
      if (mutation !== 7) headers['x-hub-signature-256'] = sig;
    } else if (kind === 'shopify') {
      let sig = createHmac('sha256', signSecret).update(signBody).digest('base64');
      if (mutation === 3) sig = sig.replaceAll('+', '-').replaceAll('/', '_');
      if (mutation === 4) sig = pad(sig);
      if (mutation === 5) sig = sig.slice(0, int(0, sig.length - 1));
      if (mutation === 6) sig = junk(int(0, 60));
      if (mutation !== 7) headers['x-shopify-hmac-sha256'] = sig;
    } else if (kind === 'stripe') {
      const v1 = ascii
        ? stripe.webhooks
            .generateTestHeaderString({
              payload: signBody.toString('utf8'),
              secret: signSecret,
              timestamp: t,
            })
            .split(',v1=')[1]!
        : createHmac('sha256', signSecret).update(`${t}.`).update(signBody).digest('hex');
      let parts = [`t=${t}`, `v1=${v1}`];
      if (mutation === 3)
        parts = [
          `v0=${'1'.repeat(64)}`,
          `v1=${'0'.repeat(64)}`,
          pad(`t=${t}`),
          pad(`v1=${v1.toUpperCase()}`),
        ];
      if (mutation === 4) parts = parts.map(pad);
      if (mutation === 5) parts = [`t=${t}`];
      if (mutation === 6) parts = [junk(int(0, 80))];
      if (mutation === 8) parts = [`t=0${t}`, `v1=${v1}`];
      if (mutation === 9) parts = [`t=${t}`, `v1=${v1}`, `t=${t + 1}`];
      if (mutation !== 7) headers['stripe-signature'] = parts.join(',');
    } else {
      const id = mutation === 8 ? `msg_${n}_\u00e9\u00a0` : `msg_${n}`;
      const mac = ascii
        ? new Webhook(signSecret).sign(id, new Date(t * 1000), signBody.toString('utf8')).slice(3)
        : createHmac('sha256', Buffer.from(signSecret.slice(6), 'base64'))
            .update(`${id}.${t}.`)
            .update(signBody)
            .digest('base64');
      let sig = `v1,${mac}`;
      if (mutation === 3)
        sig = `v2,${mac} v1,${Buffer.alloc(32).toString('base64')} v1,${mac.replaceAll('+', '-').replaceAll('/', '_')}`;
      if (mutation === 4) sig = `v1,${mac.slice(0, 10)}*${mac.slice(10)}`;
      if (mutation === 5) sig = `v1,${mac.replace(/=+$/, '')}`;
      if (mutation === 6) sig = junk(int(0, 80));
      headers['webhook-signature'] = sig;
      headers['webhook-id'] = id;
      headers['webhook-timestamp'] = mutation === 9 ? `${t}.0` : String(t);
      if (mutation === 7) delete headers[pick(['webhook-signature', 'webhook-id', 'webhook-timestamp'])];
    }
    if (r() < 0.05) caseNow = t * 1000 + pick([300_000, -300_000, 300_001, -300_001]);
    const c: Case = { kind, secret, headers, now: caseNow, body };
    lines.push(line(c, jsOutcome(c), int(1, 2 ** 31)));
  }
  return lines;
}

describe.skipIf(!hasCc)('C verifier (verify.c) vs the JS verifiers', () => {
  it(`${N} generated requests get the same answer from both`, { timeout: 180_000 }, async () => {
    const lines = await generate();
    const outcomes = new Map<string, number>();
    for (const l of lines) {
      const k = `${l.split('\t')[0]}:${l.split('\t')[7]}`;
      outcomes.set(k, (outcomes.get(k) ?? 0) + 1);
    }
    // The generator covers every outcome of every kind (timestamps only where they are signed).
    for (const k of [1, 2, 3, 4])
      for (const o of ['ok', 'missing_signature', 'bad_signature'])
        expect(outcomes.get(`${k}:${o}`) ?? 0, `${k}:${o}`).toBeGreaterThan(20);
    for (const k of [2, 4]) expect(outcomes.get(`${k}:timestamp`) ?? 0).toBeGreaterThan(20);
    const cases = join(dir, 'cases.tsv');
    writeFileSync(cases, `${lines.join('\n')}\n`);
    const bin = join(dir, 'test_verify');
    const cc = spawnSync(
      'cc',
      [
        '-std=gnu11',
        '-g',
        '-O1',
        '-Wall',
        '-Wextra',
        '-Werror',
        '-fsanitize=address,undefined',
        '-fno-sanitize-recover=all',
        `-I${native}src/core`,
        `${native}test/test_verify.c`,
        `${native}src/core/verify.c`,
        '-o',
        bin,
        '-lcrypto',
        '-lpthread',
      ],
      { encoding: 'utf8' },
    );
    expect(cc.status, cc.stderr).toBe(0);
    const run = spawnSync(bin, [cases], { encoding: 'utf8', maxBuffer: 1 << 24 });
    expect({ status: run.status, stdout: run.stdout, stderr: run.stderr.slice(0, 2000) }).toMatchObject({
      status: 0,
      stdout: expect.stringContaining(`verify differential: ${N} cases, 0 mismatches`),
    });
    // test_verify.c checks the C side of the whsec_ rule (the cases below) before the differential.
    expect(run.stdout).toContain('whsec rule: ok');
  });
});

describe('one whsec_ rule (shared parseWhsec; native/test/test_verify.c has the same cases)', () => {
  const cases: [string, boolean][] = [
    ['whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', true],
    ['whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLa==', true],
    ['MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', false],
    ['whsec_', false],
    ['whsec_Mf-Q9r8G', false],
    ['whsec_MfKQ=9r8', false],
    ['whsec_MfKQ9r8===', false],
    ['whsec_A', false],
  ];
  it.each(cases)('%s decodes: %s', (secret, ok) => {
    expect(parseWhsec(secret) !== undefined).toBe(ok);
  });

  it('the standard verifier refuses a source whose secret lacks the prefix', () => {
    const key = 'MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
    const now = 1_764_000_000_000;
    const body = '{"type":"a.b"}';
    const ts = String(now / 1000);
    const signature = `v1,${createHmac('sha256', Buffer.from(key, 'base64')).update(`m1.${ts}.${body}`).digest('base64')}`;
    const headers = { 'webhook-id': 'm1', 'webhook-timestamp': ts, 'webhook-signature': signature };
    const verify = (secret: string) => {
      const source = { id: 's', tenantId: 't', kind: 'standard', secret, maxBodyBytes: 1 << 20 } as Source;
      const p = prepareVerifier(source, headers, now);
      if (!p.ok) return p.reason;
      p.verifier.update(Buffer.from(body));
      const v = p.verifier.finish(Buffer.from(body));
      return v.ok ? 'ok' : v.reason;
    };
    // The bare key (what the reference library would take as base64 whole) verifies nothing.
    expect(verify(key)).toBe('bad_signature');
    expect(verify(`whsec_${key}`)).toBe('ok');
    // Admission adds the least key size: 16 bytes.
    expect(whsecProblem(`whsec_${key}`, 'secret')).toBeUndefined();
    expect(whsecProblem(`whsec_${Buffer.alloc(15, 1).toString('base64')}`, 'secret')).toBe(
      `secret must be whsec_ + base64 of at least ${WHSEC_MIN_KEY_BYTES} bytes`,
    );
    expect(new RegExp(WHSEC_SCHEMA_PATTERN).test(`whsec_${Buffer.alloc(16, 1).toString('base64')}`)).toBe(
      true,
    );
    expect(new RegExp(WHSEC_SCHEMA_PATTERN).test(`whsec_${Buffer.alloc(15, 1).toString('base64')}`)).toBe(
      false,
    );
  });
});

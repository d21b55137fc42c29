import dns from 'node:dns';
import { describe, expect, it } from 'vitest';
import { testConfig } from '../../../test/helpers/env.ts';
import { guardedLookup, isForbiddenAddress, type LookupFn } from '../src/index.ts';
import { core, dispatcherFixtures, endpoint, task, tenant } from './helpers.ts';

describe('isForbiddenAddress', () => {
  // With no allow list, by kind of address: true = forbidden.
  const byKind: [kind: string, addrs: string[], forbidden: boolean][] = [
    ['loopback', ['127.0.0.1', '::1'], true],
    ['private and unique local', ['10.1.2.3', '172.16.0.1', '192.168.1.1', 'fc00::1'], true],
    ['link-local (cloud metadata)', ['169.254.169.254', 'fe80::1'], true],
    ['CGNAT, multicast, broadcast', ['100.64.0.1', '224.0.0.1', 'ff02::1', '255.255.255.255'], true],
    ['unspecified and reserved', ['0.0.0.0', '::', '240.0.0.1'], true],
    // IPv4-mapped (even of a public address), NAT64 and 6to4 of 127.0.0.1
    ['IPv4 inside IPv6', ['::ffff:127.0.0.1', '::ffff:8.8.8.8', '64:ff9b::7f00:1', '2002:7f00:1::'], true],
    ['not an address', ['not-an-ip'], true],
    ['public', ['8.8.8.8', '93.184.216.34', '2606:4700:4700::1111'], false],
  ];
  it.each(byKind.flatMap(([kind, addrs, forbidden]) => addrs.map((a) => [a, kind, forbidden] as const)))(
    '%s (%s) → forbidden=%s',
    (addr, _kind, expected) => {
      expect(isForbiddenAddress(addr, [])).toBe(expected);
    },
  );

  // An allow list admits exactly its own ranges, in the family they are written in.
  const allowed: [addr: string, allow: string, forbidden: boolean][] = [
    ['127.0.0.1', '127.0.0.1/32', false],
    ['127.0.0.9', '127.0.0.1/32', true],
    ['::1', '127.0.0.1/32', true],
    ['::1', '::1/128', false],
    ['::ffff:127.0.0.1', '127.0.0.1/32', false], // mapped form of an allowed address
  ];
  it.each(allowed)('%s with allow %s → forbidden=%s', (addr, allow, expected) => {
    expect(isForbiddenAddress(addr, [allow])).toBe(expected);
  });
});

describe('guardedLookup', () => {
  const fake = (answers: { address: string; family: number }[]): LookupFn =>
    ((_h: string, _o: unknown, cb: (e: Error | null, a: unknown) => void) =>
      cb(null, answers)) as unknown as LookupFn;

  it('answers both call shapes and refuses a name when any answer is forbidden', async () => {
    const ok = guardedLookup([], fake([{ address: '8.8.8.8', family: 4 }]));
    const one = await new Promise((r) => ok('x.test', {}, (e, a, f) => r([e, a, f])));
    expect(one).toEqual([null, '8.8.8.8', 4]);
    const all = await new Promise((r) => ok('x.test', { all: true }, (e, a) => r([e, a])));
    expect(all).toEqual([null, [{ address: '8.8.8.8', family: 4 }]]);
    const mixed = guardedLookup(
      [],
      fake([
        { address: '8.8.8.8', family: 4 },
        { address: '10.0.0.1', family: 4 },
      ]),
    );
    const err = await new Promise<NodeJS.ErrnoException | null>((r) =>
      mixed('x.test', { all: true }, (e) => r(e)),
    );
    expect((err as unknown as { code: string }).code).toBe('SPW_ERR_TARGET_FORBIDDEN');
  });
});

describe('SSRF guard in the connector', () => {
  const f = dispatcherFixtures(testConfig());

  // `evil.test` resolves (through the injected lookup, as a hostile DNS would) to 127.0.0.9.
  const hostileDns = ((
    host: string,
    opts: dns.LookupOptions,
    cb: (e: Error | null, a: unknown, f?: number) => void,
  ) => {
    if (host === 'evil.test')
      return opts.all ? cb(null, [{ address: '127.0.0.9', family: 4 }]) : cb(null, '127.0.0.9', 4);
    if (host === 'good.test')
      return opts.all ? cb(null, [{ address: '127.0.0.1', family: 4 }]) : cb(null, '127.0.0.1', 4);
    return dns.lookup(host, opts, cb as never);
  }) as unknown as LookupFn;

  const dispatcher = () => f.dispatcher({ allowCidrs: ['127.0.0.1/32'], lookup: hostileDns });

  it('refuses 127.0.0.9, [::1] and a name resolving to a refused address; their listeners receive nothing', async () => {
    const r9 = await f.receiver(undefined, '127.0.0.9');
    const r6 = await f.receiver(undefined, '::1');
    const rEvil = await f.receiver(undefined, '127.0.0.9');
    const d = dispatcher();
    const t = tenant('ssrf');
    const targets = [r9.url, r6.url, `http://evil.test:${rEvil.port}/hook`];
    for (const [i, url] of targets.entries()) {
      const out = await d.dispatch(task('ssrf', `e${i}`), t, endpoint('ssrf', `e${i}`, url));
      expect(core(out), url).toEqual({ kind: 'fail', error: 'target_forbidden' });
    }
    expect(r9.requests).toHaveLength(0);
    expect(r6.requests).toHaveLength(0);
    expect(rEvil.requests).toHaveLength(0);
  });

  it("refusals do not count against the endpoint's breaker (the address is refused, not the endpoint unhealthy)", async () => {
    const r9 = await f.receiver(undefined, '127.0.0.9');
    const d = dispatcher();
    const t = tenant('ssrf-breaker');
    const ep = endpoint('ssrf-breaker', 'e', r9.url);
    // Well past the breaker's volume threshold, every attempt refused.
    for (let i = 0; i < 40; i++) {
      const out = await d.dispatch(task('ssrf-breaker', 'e'), t, ep);
      expect(core(out)).toEqual({ kind: 'fail', error: 'target_forbidden' });
    }
    expect(d.breakerState('ssrf-breaker', 'e')).toBe('closed');
    expect(r9.requests).toHaveLength(0);
  });

  it('delivers to an allowlisted address, by literal and by name', async () => {
    const ok = await f.receiver();
    const d = dispatcher();
    const t = tenant('ssrf2');
    expect((await d.dispatch(task('ssrf2', 'a'), t, endpoint('ssrf2', 'a', ok.url))).kind).toBe('delivered');
    expect(
      (await d.dispatch(task('ssrf2', 'b'), t, endpoint('ssrf2', 'b', `http://good.test:${ok.port}/x`))).kind,
    ).toBe('delivered');
    expect(ok.requests).toHaveLength(2);
    expect(ok.requests[1]!.headers.host).toBe(`good.test:${ok.port}`);
  });
});

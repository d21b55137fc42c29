import dns from 'node:dns';
import net from 'node:net';
import { errors } from '@spillway/shared';
import ipaddr from 'ipaddr.js';

/**
 * SSRF guard. Deliveries go to customer-controlled URLs, so a URL (or a DNS answer) must not be able
 * to point a worker at its own loopback, the cluster's private network, cloud metadata
 * (169.254.169.254) and so on. The check runs on the resolved address inside the connector, and the
 * socket connects to exactly the address that was checked: a second, different DNS answer
 * (rebinding) never gets a chance.
 */

type Cidr = [ipaddr.IPv4 | ipaddr.IPv6, number];

/** Parsed allowlist; parse once (the config already validated the strings). */
export function parseAllowCidrs(allowCidrs: readonly string[]): Cidr[] {
  return allowCidrs.map((c) => ipaddr.parseCIDR(c));
}

function inAllowlist(addr: ipaddr.IPv4 | ipaddr.IPv6, allow: Cidr[]): boolean {
  for (const [range, bits] of allow) {
    if (addr.kind() === range.kind() && addr.match(range, bits)) return true;
  }
  return false;
}

/**
 * True when a delivery must not connect to `address`: anything but plain global unicast
 * (loopback, private, link-local, CGNAT, multicast, broadcast, reserved, unspecified, IPv4-mapped,
 * 6to4/Teredo/NAT64 and the other special ranges ipaddr.js knows), unless the address is inside
 * `allowCidrs`. An IPv4-mapped IPv6 address is also checked as the IPv4 it maps to, so
 * `::ffff:127.0.0.1` is allowed exactly when `127.0.0.1` is. Unparseable input is forbidden.
 */
export function isForbiddenAddress(address: string, allowCidrs: readonly string[] | Cidr[]): boolean {
  const allow = (
    allowCidrs.length > 0 && typeof allowCidrs[0] === 'string'
      ? parseAllowCidrs(allowCidrs as string[])
      : allowCidrs
  ) as Cidr[];
  let addr: ipaddr.IPv4 | ipaddr.IPv6;
  try {
    addr = ipaddr.parse(address.replace(/^\[|\]$/g, '').replace(/%.*$/, ''));
  } catch {
    return true;
  }
  if (inAllowlist(addr, allow)) return false;
  if (addr.kind() === 'ipv6' && (addr as ipaddr.IPv6).isIPv4MappedAddress()) {
    const v4 = (addr as ipaddr.IPv6).toIPv4Address();
    if (inAllowlist(v4, allow)) return false;
    return true;
  }
  return addr.range() !== 'unicast';
}

export type LookupFn = typeof dns.lookup;

function forbidden(host: string, address: string): Error {
  return errors.targetForbidden(
    `delivery target ${host} resolves to ${address}, which is not allowed (SPILLWAY_TARGET_ALLOW_CIDRS)`,
  );
}

/**
 * Wraps a `dns.lookup`-compatible function so every answer is checked. Handles both call shapes
 * net.connect uses: `all: false` (one address) and `all: true` (autoSelectFamily / happy eyeballs).
 * If ANY address of the answer is forbidden the whole lookup fails: a name that mixes public and
 * private answers is a rebinding attempt, not a host worth reaching.
 */
export function guardedLookup(allowCidrs: readonly string[], base: LookupFn = dns.lookup): LookupFn {
  const allow = parseAllowCidrs(allowCidrs);
  const guarded = (hostname: string, options: unknown, callback?: unknown): void => {
    const cb = (typeof options === 'function' ? options : callback) as (...a: unknown[]) => void;
    const opts = (
      typeof options === 'function' ? {} : typeof options === 'number' ? { family: options } : (options ?? {})
    ) as dns.LookupOptions;
    base(hostname, { ...opts, all: true }, (err, addresses) => {
      if (err) return cb(err);
      const list = addresses as dns.LookupAddress[];
      if (list.length === 0)
        return cb(Object.assign(new Error(`no address for ${hostname}`), { code: 'ENOTFOUND' }));
      for (const a of list) {
        if (isForbiddenAddress(a.address, allow)) return cb(forbidden(hostname, a.address));
      }
      if (opts.all) return cb(null, list);
      const first = list[0]!;
      cb(null, first.address, first.family);
    });
  };
  return guarded as unknown as LookupFn;
}

/**
 * net.connect skips `lookup` for IP literals, so literals are checked here, before any socket
 * exists. Throws SPW_ERR_TARGET_FORBIDDEN.
 */
export function assertLiteralAllowed(hostname: string, allowCidrs: readonly string[]): void {
  const host = hostname.replace(/^\[|\]$/g, '');
  if (net.isIP(host) !== 0 && isForbiddenAddress(host, allowCidrs)) throw forbidden(hostname, host);
}

import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { BPF_DIR, BUILD, buildBpf, jsonLines, run, skipBpf } from '../../bpf/test/harness.ts';

// Crafted packets (IPv4, IPv6 with extension headers, VLAN, fragments, non-TCP, wrong port,
// allowed/blocked/refused sources, range swaps) through the real XDP program via BPF_PROG_TEST_RUN.
describe.skipIf(skipBpf)('edge: XDP allowlist fixture table (BPF_PROG_TEST_RUN)', () => {
  beforeAll(() => buildBpf());

  it('every fixture gets its verdict and counter, and leaves the packet unchanged', () => {
    const r = run(join(BUILD, 'xdp_runner'), [join(BPF_DIR, 'test/fixtures/xdp_allow.tbl')]);
    const rows = jsonLines(r.stdout);
    const fixtures = rows.filter((x) => 'name' in x);
    const failed = fixtures.filter((x) => x.ok !== true);
    expect(failed, JSON.stringify(failed, null, 1)).toEqual([]);
    expect(r.code, r.stderr).toBe(0);
    expect(fixtures.length).toBeGreaterThanOrEqual(45);
    // both families, both modes, both verdicts and the pass-through classes are covered
    const seen = new Set(fixtures.map((x) => x.counter));
    for (const c of [
      'ALLOWED',
      'DROP_NOT_ALLOWED',
      'DROP_BLOCKED',
      'MON_NOT_ALLOWED',
      'MON_BLOCKED',
      'NOT_JUDGED',
      'FRAGMENT',
      'OFF',
      'NO_ALLOWLIST',
      'MALFORMED',
    ])
      expect(seen).toContain(c);
    console.log(`xdp fixtures: ${fixtures.length} passed`);
  });

  it('the runner fails when a fixture expects the wrong verdict', async () => {
    const { mkdtempSync, writeFileSync, copyFileSync } = await import('node:fs');
    const { tmpdir } = await import('node:os');
    const dir = mkdtempSync(join(tmpdir(), 'spw-xdp-'));
    copyFileSync(join(BPF_DIR, 'test/fixtures/allow.txt'), join(dir, 'allow.txt'));
    writeFileSync(
      join(dir, 't.tbl'),
      'port 8080\nranges allow.txt\nwrong eth 203.0.113.9 10.0.0.1 tcp 8080 syn PASS ALLOWED\n',
    );
    const r = run(join(BUILD, 'xdp_runner'), [join(dir, 't.tbl')]);
    expect(r.code).toBe(1);
    expect(jsonLines(r.stdout).find((x) => x.name === 'wrong')).toMatchObject({
      ok: false,
      verdict: 'DROP',
      counter: 'DROP_NOT_ALLOWED',
    });
  });
});

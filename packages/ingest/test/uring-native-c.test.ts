/** Runs the C unit tests of the addon's core (native/test/run.sh, ASan + UBSan) from vitest. */
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const script = fileURLToPath(new URL('../native/test/run.sh', import.meta.url));
const hasCc = spawnSync('cc', ['--version']).status === 0;

describe.skipIf(!hasCc)('uring native core: C unit tests', () => {
  // Two sanitizer builds and a 20 s bound on the ring's plateau: slow on a loaded machine.
  it('parser and ring unit tests pass under sanitizers (the ring: unsent output is bounded)', {
    timeout: 180_000,
  }, () => {
    const r = spawnSync('bash', [script], { encoding: 'utf8' });
    expect({ status: r.status, stdout: r.stdout, stderr: r.stderr }).toMatchObject({
      status: 0,
      stdout: expect.stringMatching(
        /parser unit tests: \d+ checks, 0 failures[\s\S]*ring unit tests: \d+ checks, 0 failures/,
      ),
    });
  });
});

/** Runs the C unit tests of the addon's parser (native/test/run.sh, ASan + UBSan) from vitest. */
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const script = fileURLToPath(new URL('../native/test/run.sh', import.meta.url));
const hasCc = spawnSync('cc', ['--version']).status === 0;

describe.skipIf(!hasCc)('uring native core: C unit tests', () => {
  it('parser unit tests pass under sanitizers', () => {
    const r = spawnSync('bash', [script], { encoding: 'utf8' });
    expect({ status: r.status, stdout: r.stdout, stderr: r.stderr }).toMatchObject({
      status: 0,
      stdout: expect.stringMatching(/parser unit tests: \d+ checks, 0 failures/),
    });
  });
});

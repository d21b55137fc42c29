import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

describe('infra/local/env.sh', () => {
  it('puts a working `spillway` on PATH, from any directory, as the README says', () => {
    const cwd = mkdtempSync(join(tmpdir(), 'spw-env-'));
    try {
      // A bare PATH: nothing from the test runner's environment may provide `spillway`.
      const out = execFileSync(
        'bash',
        [
          '-c',
          `source ${JSON.stringify(join(ROOT, 'infra/local/env.sh'))} && command -v spillway && spillway --version`,
        ],
        {
          cwd,
          env: { HOME: process.env.HOME ?? '/root', PATH: '/usr/local/bin:/usr/bin:/bin' },
          encoding: 'utf8',
        },
      );
      const [path, version] = out.trim().split('\n');
      expect(path).toMatch(/\/spillway$/);
      const pkg = JSON.parse(readFileSync(join(ROOT, 'packages/router/package.json'), 'utf8'));
      expect(version).toBe(pkg.version);
    } finally {
      rmSync(cwd, { recursive: true, force: true });
    }
    // Under 1 s alone; in a full CI run beside the lab and chaos suites on 2 cores it once took 88 s
    // (the CLI's module graph is loaded and type-stripped on a saturated machine).
  }, 300_000);
});

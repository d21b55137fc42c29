// Builds one of the project's native addons with node-gyp against this Node's own headers
// (SPILLWAY_NODEDIR, set by infra/local/env.sh). Never downloads headers: without a nodedir that
// has include/node, it fails. Called by packages/<name>/native/build.mjs.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';

/**
 * `dir`: the addon's folder (its binding.gyp); `label`: how messages name it; `needs`: headers
 * that must exist, each with the hint printed when it does not; `built`: the file it makes.
 */
export function buildAddon({ dir, label, needs = [], built }) {
  const nodedir = process.env.SPILLWAY_NODEDIR ?? dirname(dirname(process.execPath));
  if (!existsSync(join(nodedir, 'include', 'node', 'node_api.h'))) {
    console.error(`${label}: no Node headers under ${nodedir}/include/node; source infra/local/env.sh first`);
    process.exit(1);
  }
  for (const { path, hint } of needs)
    if (!existsSync(path)) {
      console.error(`${label}: ${hint}`);
      process.exit(1);
    }
  // node-gyp is a dev dependency of the addon's package.
  const require = createRequire(join(dir, 'build.mjs'));
  const gyp = join(dirname(require.resolve('node-gyp/package.json')), 'bin', 'node-gyp.js');
  const r = spawnSync(process.execPath, [gyp, 'rebuild', `--nodedir=${nodedir}`, '--jobs=max'], {
    cwd: dir,
    stdio: 'inherit',
  });
  if (r.status !== 0) {
    console.error(`${label}: node-gyp rebuild failed`);
    process.exit(r.status ?? 1);
  }
  console.log(`${label}: built ${built}`);
}

// Builds the signing addon with node-gyp against this Node's own headers (SPILLWAY_NODEDIR, set by
// infra/local/env.sh). Never downloads headers: without a nodedir that has include/node, it fails.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const nodedir = process.env.SPILLWAY_NODEDIR ?? dirname(dirname(process.execPath));
if (!existsSync(join(nodedir, 'include', 'node', 'openssl', 'sha.h'))) {
  console.error(
    `delivery/native: no Node headers under ${nodedir}/include/node; source infra/local/env.sh first`,
  );
  process.exit(1);
}
const require = createRequire(import.meta.url);
const gyp = join(dirname(require.resolve('node-gyp/package.json')), 'bin', 'node-gyp.js');
const r = spawnSync(process.execPath, [gyp, 'rebuild', `--nodedir=${nodedir}`, '--jobs=max'], {
  cwd: here,
  stdio: 'inherit',
});
if (r.status !== 0) {
  console.error('delivery/native: node-gyp rebuild failed');
  process.exit(r.status ?? 1);
}
console.log('delivery/native: built build/Release/spillway_sign.node');

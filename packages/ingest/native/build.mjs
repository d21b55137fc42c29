// Builds the io_uring addon (infra/local/build-addon.mjs: node-gyp against this Node's own headers).
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildAddon } from '../../../infra/local/build-addon.mjs';

buildAddon({
  dir: dirname(fileURLToPath(import.meta.url)),
  label: 'ingest/native',
  needs: [
    {
      path: '/usr/include/liburing.h',
      hint: 'liburing headers missing; run infra/local/deps.sh (installs liburing-dev)',
    },
  ],
  built: 'build/Release/spillway_uring.node',
});

// Builds the signing addon (infra/local/build-addon.mjs: node-gyp against this Node's own headers;
// OpenSSL's headers come with Node's, its symbols from the Node binary).
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildAddon } from '../../../infra/local/build-addon.mjs';

buildAddon({
  dir: dirname(fileURLToPath(import.meta.url)),
  label: 'delivery/native',
  built: 'build/Release/spillway_sign.node',
});

// Builds the io_uring addon with node-gyp against this Node's own headers (SPILLWAY_NODEDIR).
// Until the addon sources exist there is nothing to build.
import { existsSync } from 'node:fs';
if (!existsSync(new URL('./binding.gyp', import.meta.url))) process.exit(0);

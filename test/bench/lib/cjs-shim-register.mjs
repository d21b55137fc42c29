import { register } from 'node:module';

register(new URL('./cjs-shim-hooks.mjs', import.meta.url));

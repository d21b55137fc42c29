/**
 * Fallback for a tree whose router cannot be loaded by plain Node because of a named import from a
 * CommonJS package that Node's static analysis does not see (e.g. `import { ConfigResourceTypes }
 * from 'kafkajs'`; vitest's interop hides this, `spillway start` does not). When — and only when —
 * the probe shows exactly that failure, Spillway processes are started with a loader hook that
 * exposes the package's real exports, and every result says so. A healthy tree never uses it.
 */
import { fileURLToPath } from 'node:url';
import { runToEnd } from './procs.ts';

const REGISTER = fileURLToPath(new URL('./cjs-shim-register.mjs', import.meta.url));
const RUNTIME = fileURLToPath(new URL('../../../packages/router/src/start.ts', import.meta.url));

let probed: Promise<string | undefined> | undefined;

/** Undefined when the router loads as is; otherwise the one-line reason the shim is in use. */
export function shimReason(): Promise<string | undefined> {
  probed ??= (async () => {
    const r = await runToEnd(
      process.execPath,
      ['--input-type=module', '-e', `await import(${JSON.stringify(RUNTIME)})`],
      60_000,
    );
    if (r.code === 0) return undefined;
    // Node words it two ways (static vs dynamic import); only kafkajs is shimmed.
    const a = /Named export '([^']+)' not found\. The requested module 'kafkajs'/.exec(r.err);
    const b = /The requested module 'kafkajs' does not provide an export named '([^']+)'/.exec(r.err);
    const name = a?.[1] ?? b?.[1];
    if (!name) return undefined;
    return `the tree's router does not load under plain Node (named export '${name}' from CommonJS 'kafkajs'); Spillway processes ran with a loader shim (test/bench/lib/cjs-shim.ts)`;
  })();
  return probed;
}

/** Extra node arguments for a Spillway process. */
export async function shimArgs(): Promise<string[]> {
  return (await shimReason()) ? ['--import', REGISTER] : [];
}

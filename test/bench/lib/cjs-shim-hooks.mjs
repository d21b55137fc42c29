// Module hooks for the fallback in cjs-shim.ts: `import { X } from 'kafkajs'` gets every property
// of kafkajs's CommonJS exports as a named export (Node's static CJS analysis misses some).
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const PREFIX = 'spillway-cjs-shim:';

export async function resolve(specifier, context, next) {
  if (specifier === 'kafkajs') {
    const real = await next(specifier, context);
    return { url: PREFIX + encodeURIComponent(real.url), shortCircuit: true };
  }
  return next(specifier, context);
}

export async function load(url, context, next) {
  if (!url.startsWith(PREFIX)) return next(url, context);
  const real = fileURLToPath(decodeURIComponent(url.slice(PREFIX.length)));
  const names = Object.keys(createRequire(real)(real)).filter(
    (n) => /^[A-Za-z_$][\w$]*$/.test(n) && n !== 'default',
  );
  const source = [
    `import { createRequire } from 'node:module';`,
    `const m = createRequire(${JSON.stringify(real)})(${JSON.stringify(real)});`,
    'export default m;',
    ...names.map((n) => `export const ${n} = m.${n};`),
  ].join('\n');
  return { format: 'module', source, shortCircuit: true };
}

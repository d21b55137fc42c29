/**
 * The named keys of `o` whose value is set: a key holding `undefined` is left out altogether, so
 * the receiver's own defaults (`{ ...defaults, ...opts }` as much as `opts.x ?? default`) still apply.
 */
export function definedOf<T extends object, K extends keyof T>(
  o: T,
  keys: readonly K[],
): Partial<Pick<T, K>> {
  const out: Partial<Pick<T, K>> = {};
  for (const k of keys) if (o[k] !== undefined) out[k] = o[k];
  return out;
}

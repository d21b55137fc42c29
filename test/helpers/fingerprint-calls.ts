/**
 * Calls of 1 to 300 fingerprint entries over slots 100-102, as (slot, entries): epochs grow inside
 * a call and between calls. The fingerprint-bucket tests write these to compare two writers.
 */
export const GROWING_CALLS = [
  [100, 1],
  [100, 20],
  [100, 300],
  [101, 5],
  [101, 120],
  [102, 40],
] as const;

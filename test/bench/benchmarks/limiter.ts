import type { Benchmark } from './types.ts';
export const limiter: Benchmark = { name: 'limiter', title: 'limiter', method: 'todo', targets: [], async run() { throw new Error('not written yet'); } };

import type { Benchmark } from './types.ts';
export const noisy: Benchmark = { name: 'noisy', title: 'noisy', method: 'todo', targets: [], async run() { throw new Error('not written yet'); } };

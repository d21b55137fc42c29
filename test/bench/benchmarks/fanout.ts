import type { Benchmark } from './types.ts';
export const fanout: Benchmark = { name: 'fanout', title: 'fanout', method: 'todo', targets: [], async run() { throw new Error('not written yet'); } };

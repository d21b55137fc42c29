import type { Benchmark } from './types.ts';
export const backlog: Benchmark = { name: 'backlog', title: 'backlog', method: 'todo', targets: [], async run() { throw new Error('not written yet'); } };

import type { Outcome } from '../lib/outcome.ts';
import type { ScenarioOptions } from './types.ts';
export async function slowloris(_o: ScenarioOptions): Promise<Outcome> { throw new Error('not written yet'); }

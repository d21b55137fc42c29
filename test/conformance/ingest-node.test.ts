import { createNodeServer } from '@spillway/ingest';
import { runIngestConformance } from './ingest.ts';

runIngestConformance('node:http', (opts) => createNodeServer(opts));

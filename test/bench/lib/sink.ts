import { forkTs, type Proc } from './procs.ts';

export interface TagStats {
  count: number;
  first: number;
  last: number;
  latP50: number;
  latP99: number;
  latMax: number;
  latCount: number;
  unique: number;
  dupes: number;
  ids?: string[];
}

export interface Sink {
  port: number;
  proc: Proc;
  url(mode: 'ok' | 'hang' | 'fail', tag: string): string;
  stats(tag: string, ids?: boolean): Promise<TagStats>;
  reset(tag?: string): Promise<void>;
  close(): Promise<void>;
}

const EMPTY: TagStats = {
  count: 0,
  first: 0,
  last: 0,
  latP50: Number.NaN,
  latP99: Number.NaN,
  latMax: Number.NaN,
  latCount: 0,
  unique: 0,
  dupes: 0,
};

export async function startSink(opts: { trackIds?: boolean } = {}): Promise<Sink> {
  const proc = forkTs(new URL('./sink-server.ts', import.meta.url), [], {
    ...process.env,
    SINK_TRACK_IDS: opts.trackIds ? '1' : '0',
  });
  const port = await new Promise<number>((resolve, reject) => {
    proc.child.once('message', (m: { port: number }) => resolve(m.port));
    proc.child.once('exit', (c) => reject(new Error(`sink exited ${c}: ${proc.err()}`)));
  });
  let rid = 0;
  const waiting = new Map<number, (m: unknown) => void>();
  proc.child.on('message', (m: { rid?: number }) => {
    if (m.rid !== undefined) {
      waiting.get(m.rid)?.(m);
      waiting.delete(m.rid);
    }
  });
  const ask = <T>(msg: Record<string, unknown>): Promise<T> =>
    new Promise((resolve) => {
      const id = ++rid;
      waiting.set(id, resolve as (m: unknown) => void);
      proc.child.send({ ...msg, rid: id });
    });
  return {
    port,
    proc,
    url: (mode, tag) => `http://127.0.0.1:${port}/${mode}/${tag}`,
    async stats(tag, ids = false) {
      const r = await ask<{ tags: Record<string, TagStats> }>({ cmd: 'stats', tag, ids });
      return r.tags[tag] ?? { ...EMPTY };
    },
    async reset(tag) {
      await ask({ cmd: 'reset', tag });
    },
    close: () => proc.stop(2000),
  };
}

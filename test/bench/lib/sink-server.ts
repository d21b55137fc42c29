/**
 * The local receiver every delivery benchmark and chaos run points endpoints at, forked as its own
 * process so that it does not share an event loop with the load generator.
 *   POST /ok/<tag>          200 at once
 *   POST /hang/<tag>        never answers (the caller's timeout ends it)
 *   POST /slow/<ms>/<tag>   200 after <ms>
 *   POST /fail/<tag>        500
 * Per tag it counts requests (a batched delivery counts its `spillway-batch-count` events), the first/last arrival, end-to-end latency (from a `"sentAt":<ms>`
 * in the body, epoch ms with fractions, set by the sender) and, when tracking, every webhook-id.
 */
import { createServer } from 'node:http';

interface Tag {
  count: number;
  first: number;
  last: number;
  lat: number[];
  ids: Map<string, number>;
}

const track = process.env.SINK_TRACK_IDS === '1';
const tags = new Map<string, Tag>();
const now = () => performance.timeOrigin + performance.now();
const SENT_AT = /"sentAt":(\d+(?:\.\d+)?)/;
let hanging = 0;

function tagOf(name: string): Tag {
  let t = tags.get(name);
  if (!t) {
    t = { count: 0, first: 0, last: 0, lat: [], ids: new Map() };
    tags.set(name, t);
  }
  return t;
}

const server = createServer((req, res) => {
  const parts = (req.url ?? '/').split('/').filter(Boolean);
  const mode = parts[0] ?? 'ok';
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', () => {
    const at = now();
    if (mode === 'hang') {
      hanging++;
      res.on('close', () => hanging--);
      return;
    }
    const tagName = mode === 'slow' ? (parts[2] ?? 'slow') : (parts[1] ?? mode);
    if (mode === 'ok' || mode === 'slow') {
      const t = tagOf(tagName);
      // A batched delivery carries several events: count them, not the request.
      t.count += Number(req.headers['spillway-batch-count'] ?? 1);
      if (!t.first) t.first = at;
      t.last = at;
      const head = chunks.length ? chunks[0]!.subarray(0, 256).toString('latin1') : '';
      const m = SENT_AT.exec(head);
      if (m && t.lat.length < 2_000_000) t.lat.push(at - Number(m[1]));
      if (track) {
        const id = String(req.headers['webhook-id'] ?? '');
        t.ids.set(id, (t.ids.get(id) ?? 0) + 1);
      }
    }
    const answer = () => {
      res.writeHead(mode === 'fail' ? 500 : 200, { 'content-type': 'text/plain' });
      res.end('ok');
    };
    if (mode === 'slow') setTimeout(answer, Number(parts[1] ?? 100));
    else answer();
  });
});
server.keepAliveTimeout = 60_000;
server.headersTimeout = 30_000;
server.requestTimeout = 0;

function pct(sorted: number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}

process.on('message', (msg: { rid: number; cmd: string; tag?: string; ids?: boolean }) => {
  if (msg.cmd === 'reset') {
    if (msg.tag) tags.delete(msg.tag);
    else tags.clear();
    process.send?.({ rid: msg.rid, ok: true });
    return;
  }
  const out: Record<string, unknown> = {};
  for (const [name, t] of tags) {
    if (msg.tag && name !== msg.tag) continue;
    const sorted = [...t.lat].sort((a, b) => a - b);
    let dupes = 0;
    for (const c of t.ids.values()) if (c > 1) dupes += c - 1;
    out[name] = {
      count: t.count,
      first: t.first,
      last: t.last,
      latP50: pct(sorted, 50),
      latP99: pct(sorted, 99),
      latMax: sorted.at(-1) ?? Number.NaN,
      latCount: sorted.length,
      unique: t.ids.size,
      dupes,
      ids: msg.ids ? [...t.ids.keys()] : undefined,
    };
  }
  process.send?.({ rid: msg.rid, tags: out, hanging });
});

server.listen(0, '127.0.0.1', () => {
  const a = server.address();
  process.send?.({ port: typeof a === 'object' && a ? a.port : 0 });
});
process.on('disconnect', () => process.exit(0));

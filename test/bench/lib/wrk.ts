/**
 * wrk with a Lua script that POSTs distinct, correctly signed GitHub deliveries: every request has
 * its own body and X-GitHub-Delivery, so an ingest that deduplicates on sha256(body) (see
 * docs/ingest.md, "Replays") measures acceptance, not its duplicate path.
 *
 * The signatures cannot be made in wrk (no HMAC in its Lua, and a Lua SHA-256 would make the
 * generator the bottleneck), so they are precomputed here: `count` records of a 64-hex
 * X-Hub-Signature-256 digest and a 10-digit sequence number, fixed width, in one file. Body i is a
 * fixed head, `<runTag>-<seq>`, a fixed tail (always exactly `bodySize` bytes); its delivery id is
 * `<runTag>-<seq>`. Each wrk thread reads its own contiguous slice in init() and walks it with two
 * `string.sub` and one concatenation per request (the same order of Lua work the fixed-body script
 * did). A run that needs more requests than its slice holds does not wrap silently: the extra
 * requests are counted (`exhausted`) and the caller fails the row. A response() hook counts every
 * answer that is not 202 (wrk's own count only sees non-2xx, and a duplicate is a 200).
 */
import { createHmac } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runToEnd } from './procs.ts';

export interface WrkResult {
  requests: number;
  rps: number;
  p50Ms: number;
  p90Ms: number;
  p99Ms: number;
  non2xx: number;
  /** Answers whose status was not 202 (from the script's response hook). */
  non202: number;
  /** Requests sent after a thread used up its slice of distinct deliveries (then bodies repeat). */
  exhausted: number;
  socketErrors: number;
  raw: string;
}

export interface WrkOptions {
  url: string;
  /** Extra fixed headers (content-type, x-github-event...). */
  headers: Record<string, string>;
  /** GitHub source secret the X-Hub-Signature-256 of every body is computed with. */
  secret: string;
  /** Distinct deliveries to precompute for the whole run (split evenly between threads). */
  count: number;
  bodySize?: number;
  /** Makes the bodies and ids of this run distinct from any other run's: [a-z0-9]{1,16}. */
  runTag: string;
  threads: number;
  connections: number;
  durationS: number;
}

const SIG_HEX = 64;
const SEQ_DIGITS = 10;
const REC = SIG_HEX + SEQ_DIGITS;

const luaStr = (s: string) =>
  `"${s.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n').replace(/\r/g, '\\r')}"`;

function unit(v: string, u: string): number {
  const n = Number(v);
  if (u === 'us') return n / 1000;
  if (u === 'ms') return n;
  if (u === 's') return n * 1000;
  if (u === 'm') return n * 60_000;
  return Number.NaN;
}

export function parseWrk(out: string): WrkResult {
  const lat = (p: string) => {
    const m = new RegExp(`^\\s+${p}%\\s+([\\d.]+)(us|ms|s|m)\\s*$`, 'm').exec(out);
    return m ? unit(m[1]!, m[2]!) : Number.NaN;
  };
  const errs = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(out);
  // The script's done() always prints these; missing means the script did not run as written.
  const counter = (name: string) => Number(new RegExp(`^${name} (\\d+)$`, 'm').exec(out)?.[1] ?? Number.NaN);
  return {
    requests: Number(/(\d+) requests in/.exec(out)?.[1] ?? Number.NaN),
    rps: Number(/Requests\/sec:\s+([\d.]+)/.exec(out)?.[1] ?? Number.NaN),
    p50Ms: lat('50'),
    p90Ms: lat('90'),
    p99Ms: lat('99'),
    non2xx: Number(/Non-2xx or 3xx responses: (\d+)/.exec(out)?.[1] ?? 0),
    non202: counter('spw-non202'),
    exhausted: counter('spw-exhausted'),
    socketErrors: errs ? errs.slice(1).reduce((a, b) => a + Number(b), 0) : 0,
    raw: out,
  };
}

/** The parts every body of a run shares: `head + <runTag>-<seq> + tail` is exactly `size` bytes. */
export function deliveryTemplate(runTag: string, size = 1024): { head: string; tail: string } {
  if (!/^[a-z0-9]{1,16}$/.test(runTag)) throw new Error(`runTag must be [a-z0-9]{1,16}: ${runTag}`);
  const head = `{"sentAt":0.000,"delivery":"${runTag}-`;
  const pre = '","action":"opened","repository":{"full_name":"spillway/bench"},"pad":"';
  const end = '"}';
  const pad = size - head.length - SEQ_DIGITS - pre.length - end.length;
  if (pad < 0) throw new Error(`body size ${size} is too small for the delivery template`);
  return { head, tail: pre + 'x'.repeat(pad) + end };
}

/** Body and id of delivery `seq` of a run (what the wrk script sends for record `seq`). */
export function deliveryAt(runTag: string, seq: number, size = 1024): { id: string; body: Buffer } {
  const { head, tail } = deliveryTemplate(runTag, size);
  const s = String(seq).padStart(SEQ_DIGITS, '0');
  return { id: `${runTag}-${s}`, body: Buffer.from(head + s + tail) };
}

/** `count` fixed-width records (signature hex, sequence number), seq 0..count-1. */
export function deliveryRecords(secret: string, runTag: string, count: number, size = 1024): Buffer {
  const { head, tail } = deliveryTemplate(runTag, size);
  const body = Buffer.from(head + '0'.repeat(SEQ_DIGITS) + tail);
  const at = Buffer.byteLength(head);
  const out = Buffer.allocUnsafe(count * REC);
  for (let i = 0; i < count; i++) {
    const s = String(i).padStart(SEQ_DIGITS, '0');
    body.write(s, at, 'latin1');
    const o = i * REC;
    out.write(createHmac('sha256', secret).update(body).digest('hex'), o, 'latin1');
    out.write(s, o + SIG_HEX, 'latin1');
  }
  return out;
}

export async function runWrk(o: WrkOptions): Promise<WrkResult> {
  const size = o.bodySize ?? 1024;
  const { head, tail } = deliveryTemplate(o.runTag, size);
  const dir = mkdtempSync(join(tmpdir(), 'spw-wrk-'));
  const script = join(dir, 'post.lua');
  const pool = join(dir, 'deliveries.bin');
  const u = new URL(o.url);
  const hdrs = Object.entries(o.headers)
    .map(([k, v]) => `pre = pre .. ${luaStr(`${k}: ${v}\r\n`)}`)
    .join('\n');
  writeFileSync(pool, deliveryRecords(o.secret, o.runTag, o.count, size));
  writeFileSync(
    script,
    `-- generated by test/bench/lib/wrk.ts
local REC = ${REC}
local PER = ${Math.floor(o.count / o.threads)}
local pre = "POST " .. ${luaStr(u.pathname)} .. " HTTP/1.1\\r\\nHost: " .. ${luaStr(u.host)} .. "\\r\\n"
${hdrs}
pre = pre .. "Content-Length: ${size}\\r\\nX-Hub-Signature-256: sha256="
local mid = ${luaStr(`\r\nX-GitHub-Delivery: ${o.runTag}-`)}
local head = ${luaStr(head)}
local tail = ${luaStr(tail)}
local threads = {}
function setup(thread)
  table.insert(threads, thread)
  thread:set("tid", #threads)
end
function init(args)
  local f = assert(io.open(${luaStr(pool)}, "rb"))
  f:seek("set", (tid - 1) * PER * REC)
  data = f:read(PER * REC) or ""
  f:close()
  if #data ~= PER * REC then error("short delivery pool") end
  pos = 0
  wrapped = false
  exhausted = 0
  non202 = 0
end
function request()
  if pos >= PER then
    pos = 0
    wrapped = true
  end
  if wrapped then exhausted = exhausted + 1 end
  local o = pos * REC
  pos = pos + 1
  local seq = data:sub(o + ${SIG_HEX + 1}, o + REC)
  return pre .. data:sub(o + 1, o + ${SIG_HEX}) .. mid .. seq .. "\\r\\n\\r\\n" .. head .. seq .. tail
end
function response(status, headers, body)
  if status ~= 202 then non202 = non202 + 1 end
end
function done(summary, latency, requests)
  local n, e = 0, 0
  for _, t in ipairs(threads) do
    n = n + t:get("non202")
    e = e + t:get("exhausted")
  end
  io.write(string.format("spw-non202 %d\\nspw-exhausted %d\\n", n, e))
end
`,
  );
  try {
    const r = await runToEnd(
      'wrk',
      [
        `-t${o.threads}`,
        `-c${o.connections}`,
        `-d${o.durationS}s`,
        '--latency',
        '--timeout',
        '10s',
        '-s',
        script,
        o.url,
      ],
      (o.durationS + 30) * 1000,
    );
    if (r.code !== 0) throw new Error(`wrk failed (${r.code}): ${r.err || r.out}`);
    const res = parseWrk(r.out);
    if (Number.isNaN(res.non202) || Number.isNaN(res.exhausted))
      throw new Error(`wrk script counters missing from its output: ${r.out.slice(-300)}`);
    return res;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

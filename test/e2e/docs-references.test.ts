import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { join, posix } from 'node:path';
import { fileURLToPath } from 'node:url';
import { DEFAULTS, retryDelayMs } from '@spillway/shared';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

/**
 * No doc or comment names a file that is not in the repo. Every Markdown file, and the comments of
 * every source, script and manifest (TypeScript/JavaScript, C, Lua, shell, YAML, Dockerfiles…), is
 * scanned for file references: repo-relative paths (`packages/router/src/worker/engine.ts`,
 * `infra/local/kafka.sh`, `docs/operations.md`, folders such as `test/helpers/`), paths from the
 * naming file's folder (starting with ./ or ../), paths inside a package (`native/test/run.sh`,
 * `commands/dedup-promote-1.lua`) and bare file names (`verify.c`, `engine.ts`).
 *
 * A reference holds when it names a tracked file or folder: a ./ or ../ path from the naming file's
 * folder; any other path from the repo root, from the naming file's folder or one above it, or as
 * the tail of a tracked path (a package's `test/corpus`); a bare name by name alone. Not references:
 * absolute paths, URLs, names in the ignore rules (build output), the name of a dependency
 * (`ipaddr.js`), and placeholders (`<name>-<numkeys>.lua`, `test_*.c`, `$FUZZ_OUT/corpus`).
 */

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/** File endings that make a word a file name. */
const EXT = 'ts|tsx|js|mjs|cjs|lua|c|h|sh|md|json|ya?ml|css|html|gyp|xml|tbl|txt|conf|py|toml';
/** The repo's top-level folders: a path starting with one is from the root. */
const ROOTS = ['packages', 'docs', 'test', 'infra', 'deploy', 'bpf'];

/** A path-like word ending in a file name, not inside a longer word, path, URL or `$VAR/`. */
const FILE_REF = new RegExp(
  String.raw`(?<![\w@$~/.\-*<>{}])((?:\.{1,2}/)*(?:[\w@+\-][\w@+.\-]*/)*[\w+\-][\w+.\-]*\.(?:${EXT}))(?![\w/\-*<>{}]|\.[A-Za-z0-9])`,
  'g',
);
/** A folder reference from the root: `test/helpers/`, `packages/router/src/worker`. */
const DIR_REF = new RegExp(
  String.raw`(?<![\w@$~/.\-*<>{}])((?:${ROOTS.join('|')})/(?:[\w@+\-][\w@+.\-]*/?)*)(?![\w/\-*<>{}]|\.[A-Za-z0-9])`,
  'g',
);
const URL_RE = /\b[a-z][a-z0-9+.-]*:\/\/[^\s)>\]`'"]+/gi;
/** `verify.{h,c}` → `verify.h verify.c`. */
const BRACES = /([\w@+./-]*)\{([\w+.-]+(?:,[\w+.-]+)+)\}([\w+.-]*)/g;

interface Reference {
  /** Repo-relative file that names it. */
  in: string;
  line: number;
  ref: string;
}

interface Tree {
  files: Set<string>;
  dirs: Set<string>;
  /** Tracked paths by file name. */
  byName: Map<string, string[]>;
  /** Every dependency any package.json names (`ipaddr.js` is a package, not a file). */
  deps: Set<string>;
}

function trackedTree(root = ROOT): Tree {
  const out = execFileSync('git', ['ls-files', '-z', '--cached', '--others', '--exclude-standard'], {
    cwd: root,
    encoding: 'utf8',
    maxBuffer: 64 << 20,
  });
  const files = new Set(out.split('\0').filter((f) => f && existsSync(join(root, f))));
  const dirs = new Set<string>();
  const byName = new Map<string, string[]>();
  const deps = new Set<string>();
  for (const f of files) {
    const name = posix.basename(f);
    byName.set(name, [...(byName.get(name) ?? []), f]);
    for (let d = posix.dirname(f); d !== '.'; d = posix.dirname(d)) dirs.add(d);
    if (name === 'package.json') {
      const pkg = JSON.parse(readFileSync(join(root, f), 'utf8')) as Record<string, unknown>;
      for (const k of ['dependencies', 'devDependencies', 'optionalDependencies', 'peerDependencies'])
        for (const dep of Object.keys((pkg[k] as object | undefined) ?? {})) deps.add(dep);
    }
  }
  return { files, dirs, byName, deps };
}

// --- comments of each kind of file --------------------------------------------------------------

interface Chunk {
  text: string;
  /** 1-based line of text[0] in the file. */
  line: number;
}

const lineAt = (src: string, pos: number) => src.slice(0, pos).split('\n').length;

function tsComments(src: string, file: string): Chunk[] {
  const sf = ts.createSourceFile(file, src, ts.ScriptTarget.Latest, true, ts.ScriptKind.TSX);
  const seen = new Set<number>();
  const out: Chunk[] = [];
  const take = (ranges: ts.CommentRange[] | undefined) => {
    for (const r of ranges ?? []) {
      if (seen.has(r.pos)) continue;
      seen.add(r.pos);
      out.push({ text: src.slice(r.pos, r.end), line: lineAt(src, r.pos) });
    }
  };
  const walk = (node: ts.Node) => {
    take(ts.getLeadingCommentRanges(src, node.getFullStart()));
    take(ts.getTrailingCommentRanges(src, node.getEnd()));
    ts.forEachChild(node, walk);
  };
  walk(sf);
  take(ts.getLeadingCommentRanges(src, sf.endOfFileToken.getFullStart()));
  return out;
}

/** C: // and block comments, outside string and character literals. */
function cComments(src: string): Chunk[] {
  const out: Chunk[] = [];
  for (let i = 0; i < src.length; i++) {
    const c = src[i];
    if (c === '"' || c === "'") {
      for (i++; i < src.length && src[i] !== c && src[i] !== '\n'; i++) if (src[i] === '\\') i++;
    } else if (c === '/' && src[i + 1] === '/') {
      const end = src.indexOf('\n', i);
      const e = end < 0 ? src.length : end;
      out.push({ text: src.slice(i, e), line: lineAt(src, i) });
      i = e;
    } else if (c === '/' && src[i + 1] === '*') {
      const end = src.indexOf('*/', i + 2);
      const e = end < 0 ? src.length : end + 2;
      out.push({ text: src.slice(i, e), line: lineAt(src, i) });
      i = e - 1;
    }
  }
  return out;
}

/** Lua: -- to the end of the line, and --[[ … ]] blocks. */
function luaComments(src: string): Chunk[] {
  const out: Chunk[] = [];
  for (const m of src.matchAll(/--\[(=*)\[[\s\S]*?\]\1\]|--[^\n]*/g))
    out.push({ text: m[0], line: lineAt(src, m.index) });
  return out;
}

/** Shell, YAML, Dockerfiles, Makefiles: # to the end of the line (not a shebang, not `${#x}`). */
function hashComments(src: string): Chunk[] {
  const out: Chunk[] = [];
  src.split('\n').forEach((l, i) => {
    if (i === 0 && l.startsWith('#!')) return;
    const m = /(?:^|\s)#(.*)$/.exec(l);
    if (m) out.push({ text: m[1]!, line: i + 1 });
  });
  return out;
}

function xmlComments(src: string): Chunk[] {
  return [...src.matchAll(/<!--[\s\S]*?-->/g)].map((m) => ({ text: m[0], line: lineAt(src, m.index) }));
}

/** What of a file is prose about the repo: all of a Markdown file, the comments of anything else. */
function proseOf(file: string, src: string): Chunk[] {
  const name = posix.basename(file);
  if (/\.md$/.test(name)) return [{ text: src, line: 1 }];
  if (/\.(?:[cm]?[jt]sx?)$/.test(name)) return tsComments(src, file);
  if (/\.[ch]$/.test(name)) return cComments(src);
  if (/\.lua$/.test(name)) return luaComments(src);
  if (/\.xml$/.test(name)) return xmlComments(src);
  if (
    /\.(?:sh|ya?ml|conf|toml|dockerignore|gyp)$/.test(name) ||
    /^(?:Dockerfile|Containerfile|Makefile|run)$/.test(name)
  )
    return hashComments(src);
  return [];
}

// --- references -----------------------------------------------------------------------------------

/** Every file reference in a piece of prose, with the line it is on. */
function referencesIn(chunk: Chunk): { ref: string; line: number }[] {
  const text = chunk.text
    .replace(URL_RE, (u) => ' '.repeat(u.length))
    .replace(BRACES, (_m, pre: string, alts: string, post: string) =>
      alts
        .split(',')
        .map((a) => `${pre}${a}${post}`)
        .join(' '),
    );
  const out: { ref: string; line: number }[] = [];
  for (const re of [FILE_REF, DIR_REF])
    for (const m of text.matchAll(re)) {
      const ref = m[1]!.replace(/\.$/, '');
      if (re === DIR_REF && out.some((o) => o.ref === ref)) continue;
      out.push({ ref, line: chunk.line + lineAt(text, m.index) - 1 });
    }
  return out;
}

/** True when `ref`, named in `from`, is a tracked file or folder (see the header for the rules). */
function resolves(tree: Tree, from: string, ref: string): boolean {
  const path = ref.replace(/\/$/, '');
  const has = (p: string) => tree.files.has(p) || tree.dirs.has(p);
  const here = posix.dirname(from);
  if (path.startsWith('./') || path.startsWith('../')) return has(posix.normalize(posix.join(here, path)));
  if (!path.includes('/')) return tree.byName.has(path) || has(path) || tree.deps.has(path);
  // From the root, or from the naming file's folder or one above it.
  for (let d = here; ; d = posix.dirname(d)) {
    if (has(d === '.' ? path : `${d}/${path}`)) return true;
    if (d === '.') break;
  }
  const tail = `/${path}`;
  for (const f of tree.files) if (f.endsWith(tail)) return true;
  for (const d of tree.dirs) if (d.endsWith(tail)) return true;
  return false;
}

/** The files whose prose is checked. */
function scanned(tree: Tree): string[] {
  return [...tree.files].filter(
    (f) =>
      f.endsWith('.md') ||
      (/^(?:packages|test|infra|deploy|bpf|\.ci)\//.test(f) && !/\/(?:fixtures|corpus)\//.test(f)) ||
      /^[^/]+\.(?:ts|mjs|js)$/.test(f),
  );
}

/** Refs that match the ignore rules are build output (`build/Release/…`, `dist/`): not checked here. */
function ignored(all: string[]): Set<string> {
  const refs = all.filter((r) => !r.startsWith('.'));
  if (refs.length === 0) return new Set();
  try {
    const out = execFileSync('git', ['check-ignore', '--no-index', '--stdin'], {
      cwd: ROOT,
      input: refs.join('\n'),
      encoding: 'utf8',
    });
    return new Set(out.split('\n').filter(Boolean));
  } catch (err) {
    // Exit 1: none of them is ignored.
    if ((err as { status?: number }).status === 1) return new Set();
    throw err;
  }
}

/** How many references the last staleReferences() call looked at. */
const checked = { count: 0 };

/** Every reference in the repo's prose that names no tracked file or folder. */
function staleReferences(tree: Tree = trackedTree(), root = ROOT): Reference[] {
  checked.count = 0;
  const stale: Reference[] = [];
  for (const file of scanned(tree)) {
    const abs = join(root, file);
    if (statSync(abs).size > 1 << 20) continue;
    const src = readFileSync(abs, 'utf8');
    for (const chunk of proseOf(file, src))
      for (const { ref, line } of referencesIn(chunk)) {
        checked.count++;
        if (!resolves(tree, file, ref)) stale.push({ in: file, line, ref });
      }
  }
  const skip = ignored([...new Set(stale.map((s) => s.ref))]);
  return stale.filter((s) => !skip.has(s.ref));
}

/**
 * Stale references in files another change is rewriting at the time of writing, to be fixed there
 * (`file: ref`). The external design and contract documents are not part of this repo.
 */
const FIXED_ELSEWHERE: string[] = [];

describe('docs and comments name only files that exist', () => {
  const tree = trackedTree();

  it('finds a stale reference of each kind, and passes real ones (the check can fail)', () => {
    const fake = 'docs/fake.md';
    const text = [
      'The worker is `packages/router/src/worker/engine.ts` (see docs/architecture.md, test/helpers/).',
      'Gone: packages/router/src/worker/gone.ts, docs/gone.md, infra/local/gone.sh, test/gone/.',
      'Bare: verify.c and dedup-promote-1.lua exist; nothing-here.lua and ghost.ts do not.',
      'Inside a package: native/test/run.sh exists, native/test/gone.sh does not.',
      'Placeholders are not references: commands/<name>-<numkeys>.lua, test_*.c, $FUZZ_OUT/x.c, *.bpf.c,',
      'nor are URLs (https://example.com/a/b.ts) or build output (packages/ingest/native/build/x.json).',
      'Braces expand: native/src/core/verify.{h,c} and native/src/core/gone.{h,c}.',
    ].join('\n');
    const refs = referencesIn({ text, line: 1 });
    const bad = refs.filter((r) => !resolves(tree, fake, r.ref)).map((r) => r.ref);
    const skip = ignored(bad);
    expect(bad.filter((r) => !skip.has(r))).toEqual([
      'packages/router/src/worker/gone.ts',
      'docs/gone.md',
      'infra/local/gone.sh',
      'nothing-here.lua',
      'ghost.ts',
      'native/test/gone.sh',
      'native/src/core/gone.h',
      'native/src/core/gone.c',
      'test/gone/',
    ]);
    // Relative to the naming file.
    expect(resolves(tree, 'packages/ingest/src/verify/github.ts', './common.ts')).toBe(true);
    expect(resolves(tree, 'packages/ingest/src/verify/github.ts', './gone.ts')).toBe(false);
    expect(resolves(tree, 'packages/router/src/admin/services.ts', '../records/stats.ts')).toBe(true);
    // Comments only, in code: a string that looks like a path is not prose.
    const code = "// see ../gone/a.ts\nconst p = 'docs/also-gone.md';\n/* and test/helpers/wait.ts */";
    expect(proseOf('packages/x/src/y.ts', code).flatMap((c) => referencesIn(c).map((r) => r.ref))).toEqual([
      '../gone/a.ts',
      'test/helpers/wait.ts',
    ]);
  });

  it('every file a doc or comment names is in the repo', () => {
    const stale = staleReferences(tree);
    // The scan is not vacuous: docs and comments name some 470 files.
    expect(checked.count).toBeGreaterThan(300);
    const elsewhere = (s: Reference) => FIXED_ELSEWHERE.includes(`${s.in}: ${s.ref}`);
    expect(stale.filter((s) => !elsewhere(s)).map((s) => `${s.in}:${s.line}: ${s.ref}`)).toEqual([]);
    // Each entry there is still stale: once its file is fixed, the entry goes too.
    expect(FIXED_ELSEWHERE.filter((e) => !stale.some((s) => `${s.in}: ${s.ref}` === e))).toEqual([]);
  });
});

// --- the docs' numbers are the code's ---------------------------------------------------------------

const read = (file: string) => readFileSync(join(ROOT, file), 'utf8');

/** The value of `const NAME = <number or product>;` in a source file, e.g. `256 * 1024`, `10_000`. */
function constant(file: string, name: string): number {
  const m = new RegExp(String.raw`\bconst ${name}(?::[^=]+)? = ([\d_]+(?: \* [\d_]+)*);`).exec(read(file));
  if (!m) throw new Error(`${file}: no numeric \`const ${name}\``);
  return m[1]!.split('*').reduce((n, f) => n * Number(f.trim().replaceAll('_', '')), 1);
}

const WORDS: Record<string, number> = { one: 1, two: 2, three: 3, four: 4 };

/** Every number `re` (first group) finds in a doc, as written: `10 000`, `10,000`, `1.5`, `two`. */
function docNumbers(doc: string, re: RegExp): number[] {
  const found = [...read(doc).matchAll(new RegExp(re.source, `${re.flags}g`))].map(
    (m) => WORDS[m[1]!] ?? Number(m[1]!.replace(/[ ,\u202f]/g, '')),
  );
  if (found.length === 0) throw new Error(`${doc}: nothing matches ${re}`);
  return found;
}

const A = 'docs/architecture.md';
const KiB = 1024;
const MiB = 1024 * 1024;
const worker = (n: string) => constant('packages/router/src/worker/worker.ts', n);
const engine = (n: string) => constant('packages/router/src/worker/engine.ts', n);
const intake = (n: string) => constant('packages/router/src/intake/intake.ts', n);
const drainer = (n: string) => constant('packages/router/src/spill/drainer.ts', n);

/** [doc, where it says the number (first group), the code's value in the doc's unit]. */
const HEADLINE: [doc: string, says: RegExp, code: () => number][] = [
  [A, /BullMQ Worker \((\d+) job slots/, () => worker('CONCURRENCY')],
  [A, /\(([\d ]+)–[\d ]+ tasks\)/, () => engine('CLAIM_MIN')],
  [A, /\([\d ]+–([\d ]+) tasks\)/, () => engine('MAX_TASKS')],
  [A, /at least ([\d ]+), at most [\d ]+ tasks/, () => engine('CLAIM_MIN')],
  [A, /at least [\d ]+, at most ([\d ]+) tasks/, () => engine('MAX_TASKS')],
  [A, /about (\w+) seconds? of the\s+worker's\s+measured/, () => engine('CLAIM_S')],
  [
    A,
    /less than (\w+) seconds? of its\s+own\s+measured rate/,
    () => constant('packages/router/src/worker/lanes.ts', 'JOB_LOOKAHEAD_S'),
  ],
  [A, /at most (\d+) jobs \(`JOB_SHARE`/, () => engine('JOB_SHARE')],
  [A, /an eighth of the\s+(\d+)\s+slots/, () => engine('JOB_SHARE') * 8],
  [A, /an eighth of the\s+(\d+)\s+slots/, () => worker('CONCURRENCY')],
  [A, /or (\d+) events; at once when idle/, () => intake('MAX_BATCH')],
  [A, /fires or (\d+) are waiting/, () => intake('MAX_BATCH')],
  [A, /NX GET PX (\d+)`/, () => intake('PENDING_TTL_MS')],
  [A, /wait up to ([\d.]+) s for it/, () => intake('FOREIGN_PENDING_WAIT_MS') / 1000],
  [A, /Redis down, (\d+) s timeout/, () => intake('COMMIT_TIMEOUT_MS') / 1000],
  [A, /in chunks of (\d+)/, () => constant('packages/router/src/admin/router-services.ts', 'REPLAY_CHUNK')],
  [A, /flushed every (\d+) ms/, () => constant('packages/router/src/records/counters.ts', 'FLUSH_MS')],
  [
    A,
    /every second with a (\d+) s TTL/,
    () => constant('packages/router/src/records/stats.ts', 'STATS_TTL_MS') / 1000,
  ],
  [
    A,
    /one (\d+) ms window and one delay bucket/,
    () => constant('packages/router/src/retry/scheduler.ts', 'FLUSH_MS'),
  ],
  [
    A,
    /tenth of the delay \(at least (\d+) ms/,
    () => constant('packages/router/src/retry/scheduler.ts', 'MIN_BUCKET_MS'),
  ],
  [A, /`maxBytesPerPartition` \((\d+) KiB\)/, () => drainer('LOOKAHEAD_BYTES') / KiB],
  [A, /only after up to (\d+) s/, () => drainer('IDLE_BLOCKED_WAIT_MS') / 1000],
  [A, /admin client every (\d+) ms/, () => drainer('LATEST_POLL_MS')],
  [A, /doubles the next wait, up to (\d+) s/, () => drainer('MAX_BLOCKED_WAIT_MS') / 1000],
  [A, /any progress resets it to (\d+) s/, () => drainer('BLOCKED_WAIT_MS') / 1000],
  [
    A,
    /splits sends at (\d+) KiB/,
    () => constant('packages/router/src/spill/producer.ts', 'MAX_SEND_BYTES') / KiB,
  ],
  [
    A,
    /`max\.message\.bytes` = (\d+) MiB/,
    () => constant('packages/router/src/roles/runtime.ts', 'SPILL_MAX_MESSAGE_BYTES') / MiB,
  ],
  [
    A,
    /`SPILLWAY_WORKER_BODY_BUDGET` bytes of event bodies \(default (\d+) MiB/,
    () => Number(DEFAULTS.SPILLWAY_WORKER_BODY_BUDGET) / MiB,
  ],
  [A, /coalesced \(one per (\d+) ms\)/, () => engine('WAKE_MS')],
  [A, /plus a (\d+) ms refresh/, () => engine('REFRESH_MS')],
  [
    A,
    /no completion for (\d+) s \(or four/,
    () => constant('packages/router/src/worker/lanes.ts', 'STALL_MS') / 1000,
  ],
  [A, /`retryDelayMs` \((\d+) ms doubling/, () => retryDelayMs(0)],
  [A, /doubling to a\s+(\d+) s cap/, () => retryDelayMs(100) / 1000],
  [
    'docs/operations.md',
    /keeps signing next to it for (\d+) h/,
    () => constant('packages/router/src/admin/routes.ts', 'SECRET_OVERLAP_MS') / 3_600_000,
  ],
];

/** The rows `| SPILLWAY_X | default | … |` of a doc's tables (backticks dropped). */
function envRows(doc: string): [name: string, value: string, rest: string[]][] {
  const rows: [string, string, string[]][] = [];
  for (const line of read(doc).split('\n')) {
    const cells = line.split('|').map((c) => c.trim().replaceAll('`', ''));
    if (cells.length >= 4 && /^SPILLWAY_[A-Z_]+$/.test(cells[1]!))
      rows.push([cells[1]!, cells[2]!, cells.slice(3)]);
  }
  return rows;
}

/** How the docs write a default the code leaves empty. */
const EMPTY: Record<string, string> = {
  SPILLWAY_SPILL_REPLICATION: 'min(3, brokers)',
  SPILLWAY_REDIS_WAIT_REPLICAS: '1 on a cluster, else 0',
};

describe("the docs' numbers are the code's", () => {
  it.each(HEADLINE)('%s: %s', (doc, says, code) => {
    const found = docNumbers(doc, says);
    expect(found).toEqual(found.map(code));
  });

  it.each(['README.md', 'docs/operations.md'])(
    '%s: every default in its environment tables is DEFAULTS',
    (doc) => {
      const rows = envRows(doc);
      expect(rows.length).toBeGreaterThan(10);
      const defaults = DEFAULTS as Record<string, string>;
      for (const [name, value] of rows) {
        if (name === 'SPILLWAY_ADMIN_TOKEN') expect(value, name).toBe('required for start');
        else if (!(name in defaults) || defaults[name] === '')
          expect([EMPTY[name] ?? 'empty', '(empty)'], `${doc} ${name}`).toContain(value);
        else expect(value, `${doc} ${name}`).toBe(defaults[name]);
      }
    },
  );

  it('docs/operations.md names every variable DEFAULTS has, and any default it gives in prose is right', () => {
    const text = read('docs/operations.md');
    for (const [name, value] of Object.entries(DEFAULTS)) {
      expect(text, name).toContain(name);
      for (const m of text.matchAll(new RegExp(`${name}\`? \\(default \`([^\`]*)\``, 'g')))
        expect(m[1], name).toBe(value);
    }
  });

  it("docs/operations.md: the failover knobs' ranges are the ones config.ts enforces", () => {
    const config = read('packages/shared/src/config.ts');
    const ms = (s: string) => {
      const m = /^([\d.]+)(ms|s|m)$/.exec(s)!;
      return Number(m[1]) * { ms: 1, s: 1000, m: 60_000 }[m[2] as 'ms' | 's' | 'm'];
    };
    const rows = envRows('docs/operations.md').filter(([n]) => /JOB_LOCK|JOB_STALLED|KAFKA_SESSION/.test(n));
    expect(rows.map(([n]) => n)).toEqual([
      'SPILLWAY_JOB_LOCK',
      'SPILLWAY_JOB_STALLED_INTERVAL',
      'SPILLWAY_KAFKA_SESSION_TIMEOUT',
    ]);
    for (const [name, , [range]] of rows) {
      const code = new RegExp(`durationWithin\\(\\s*'${name}',\\s*([\\d_]+),\\s*([\\d_]+),`).exec(config);
      expect(code, name).not.toBeNull();
      const [lo, hi] = range!.split('–').map(ms);
      expect([lo, hi], name).toEqual([
        Number(code![1]!.replaceAll('_', '')),
        Number(code![2]!.replaceAll('_', '')),
      ]);
    }
  });
});

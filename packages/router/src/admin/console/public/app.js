// Spillway operator console. Hand-written, no framework, no build step: served as is by the admin
// role (see docs/console.md). Views are picked by the URL hash; the token lives in sessionStorage
// and travels only in the Authorization header, never in a URL.

const TOKEN_KEY = 'spillway.console.token';
const DLQ_PAGE = 25;
const EVENTS_PAGE = 25;
const ATTEMPTS_PAGE = 25;
const CHART_POINTS = 300;
/** How often a running resend or recover is read again (one small GET, only while it runs). */
const OPERATION_POLL_MS = 1000;

const main = document.getElementById('main');
const bannerEl = document.getElementById('banner');
const whoEl = document.getElementById('who');
const navEl = document.getElementById('nav');
const signoutBtn = document.getElementById('signout');

/** @type {{ token: string | null, session: any, cleanup: (() => void)[], renderSeq: number }} */
const state = { token: sessionStorage.getItem(TOKEN_KEY), session: null, cleanup: [], renderSeq: 0 };

// --- DOM ----------------------------------------------------------------------------------------

/** Creates an element; `attrs` keys starting with "on" are listeners. Children are nodes or text. */
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs ?? {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

const nf = new Intl.NumberFormat('en-US');
const rf = new Intl.NumberFormat('en-US', { maximumFractionDigits: 1 });
const fmt = (n) => (n === null || n === undefined ? '–' : nf.format(n));
const fmtRate = (n) => (n === null || n === undefined ? '–' : rf.format(n));
const badge = (text, cls = text) => h('span', { class: `badge ${cls}` }, text);
const fmtTime = (iso) => new Date(iso).toLocaleString();
const pad = (n) => String(n).padStart(2, '0');
/** A time as a datetime-local input shows it (local time, to the second). */
function toLocalInput(ms) {
  const d = new Date(ms);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}
/** A datetime-local value as the API takes it (ISO-8601, UTC); undefined when empty. */
const fromLocalInput = (v) => (v ? new Date(v).toISOString() : undefined);
/**
 * A request id for an idempotent POST (resend, recover). Made from getRandomValues, which, unlike
 * randomUUID, also works on a plain-http admin address.
 */
function newRequestId() {
  const b = crypto.getRandomValues(new Uint8Array(12));
  return `console-${Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('')}`;
}

/** Sets textContent only when it changed (the overview updates thousands of cells a second). */
function setText(el, text) {
  if (el && el.textContent !== text) el.textContent = text;
}

function setBadge(el, text) {
  if (!el) return;
  const b = el.firstElementChild;
  if (b && b.textContent === text) return;
  el.replaceChildren(badge(text));
}

// --- banner ---------------------------------------------------------------------------------------

const banner = {
  /** kind: 'redis' (a 503 from the API or the stream) or 'conn' (Spillway itself unreachable). */
  show(kind) {
    bannerEl.hidden = false;
    bannerEl.className = kind === 'conn' ? 'conn' : '';
    setText(
      bannerEl,
      kind === 'conn' ? 'Spillway is unreachable, reconnecting…' : 'Redis unavailable, retrying…',
    );
  },
  clear() {
    if (!bannerEl.hidden) {
      bannerEl.hidden = true;
      bannerEl.textContent = '';
    }
  },
};

// --- API ------------------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

async function errorOf(res) {
  let body = null;
  try {
    body = await res.json();
  } catch {}
  return new ApiError(
    res.status,
    body?.error?.code ?? `http_${res.status}`,
    body?.error?.message ?? (res.statusText || `HTTP ${res.status}`),
  );
}

/** Calls the admin API with the session's token. Throws ApiError with the API's own words. */
async function api(method, path, body, token = state.token) {
  let res;
  try {
    res = await fetch(path, {
      method,
      headers: {
        authorization: `Bearer ${token}`,
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: 'no-store',
    });
  } catch {
    banner.show('conn');
    throw new ApiError(0, 'unreachable', 'Spillway is unreachable');
  }
  if (res.status === 503) {
    banner.show('redis');
    throw await errorOf(res);
  }
  banner.clear();
  if (!res.ok) throw await errorOf(res);
  if (res.status === 204) return null;
  return res.json();
}

/** An error as the API words it: its message, and its code. */
function errorView(err) {
  if (!(err instanceof ApiError))
    return h('p', { class: 'error', role: 'alert' }, String(err?.message ?? err));
  return h('p', { class: 'error', role: 'alert' }, err.message, ' ', h('code', {}, `(${err.code})`));
}

/** A place for a form's outcome: cleared, then an error or a success line. */
function outcome() {
  const el = h('div', { 'aria-live': 'polite' });
  return {
    el,
    error(err) {
      el.replaceChildren(errorView(err));
    },
    ok(...nodes) {
      el.replaceChildren(h('p', { class: 'ok' }, ...nodes));
    },
    clear() {
      el.replaceChildren();
    },
  };
}

/** Runs an action; its error, if any, goes to the outcome `out`. */
async function attempt(out, action) {
  try {
    await action();
  } catch (err) {
    out.error(err);
  }
}

/** Asks first (confirmDialog's title, text and button), then attempts the action. */
async function confirmed([title, text, okLabel], out, action) {
  if (await confirmDialog(title, text, okLabel)) await attempt(out, action);
}

/** An input (or select) inside its label. */
const labelled = (text, input) => h('label', { for: input.id }, text, input);

/** The optional id field of a create form: left empty, the API generates the id. */
const optionalId = (id) => h('input', { id, name: 'id', placeholder: 'generated' });

/**
 * An inline form named `label`: the labelled `fields`, then a submit button saying `button` (the
 * label unless given). A submit clears `out`, then attempts `submit`.
 */
function actionForm(label, out, fields, submit, button = label) {
  return h(
    'form',
    {
      class: 'inline',
      'aria-label': label,
      onsubmit: async (e) => {
        e.preventDefault();
        out.clear();
        await attempt(out, submit);
      },
    },
    fields,
    h('button', { type: 'submit' }, button),
  );
}

/** A table of one header row (`columns`: names, or ready <th> nodes) over `tbody`. */
function headedTable(id, columns, tbody, caption) {
  return h(
    'table',
    { id },
    caption ? h('caption', {}, caption) : null,
    h(
      'thead',
      {},
      h(
        'tr',
        {},
        columns.map((t) => (t instanceof Node ? t : h('th', { scope: 'col' }, t))),
      ),
    ),
    tbody,
  );
}

// --- server-sent events over fetch (EventSource cannot send an Authorization header) ---------------

/**
 * Opens an SSE stream and keeps it open: reconnects after 1 s when it drops. `onSnapshot` gets each
 * snapshot; a `failure` frame (the server could not make one: Redis down, tenant gone) goes to
 * `onFailure`. A refusal before the stream opens (401/403/404) is final and also goes to onFailure.
 */
function openStream(path, onSnapshot, onFailure) {
  const ctrl = new AbortController();
  let closed = false;
  const handle = (block) => {
    let event = 'message';
    let data = '';
    for (const line of block.split('\n')) {
      if (line.startsWith('event:')) event = line.slice(6).trim();
      else if (line.startsWith('data:')) data += line.slice(5).trimStart();
    }
    if (!data) return;
    const body = JSON.parse(data);
    if (event === 'snapshot') {
      banner.clear();
      onSnapshot(body);
    } else if (event === 'failure') {
      if (body.status === 503) banner.show('redis');
      onFailure(new ApiError(body.status, body.error.code, body.error.message), false);
    }
  };
  (async () => {
    while (!closed) {
      try {
        const res = await fetch(path, {
          headers: { authorization: `Bearer ${state.token}`, accept: 'text/event-stream' },
          signal: ctrl.signal,
          cache: 'no-store',
        });
        if (!res.ok) {
          const err = await errorOf(res);
          // The token stopped working (a revoked key): back to sign-in, with the API's words.
          if (res.status === 401) {
            closed = true;
            signOut(err);
            return;
          }
          if (res.status === 503) banner.show('redis');
          onFailure(err, res.status !== 503);
          if (res.status !== 503) return;
        } else {
          const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
          let buf = '';
          for (;;) {
            const { value, done } = await reader.read();
            if (done) break;
            buf += value;
            for (let i = buf.indexOf('\n\n'); i >= 0; i = buf.indexOf('\n\n')) {
              handle(buf.slice(0, i));
              buf = buf.slice(i + 2);
            }
          }
        }
      } catch {
        if (closed) return;
        banner.show('conn');
      }
      if (!closed) await new Promise((r) => setTimeout(r, 1000));
    }
  })();
  return () => {
    closed = true;
    ctrl.abort();
  };
}

// --- confirm dialog ----------------------------------------------------------------------------------

function confirmDialog(title, text, okLabel) {
  const dlg = document.getElementById('confirm');
  document.getElementById('confirm-title').textContent = title;
  document.getElementById('confirm-text').textContent = text;
  const ok = document.getElementById('confirm-ok');
  const cancel = document.getElementById('confirm-cancel');
  ok.textContent = okLabel;
  return new Promise((resolve) => {
    const done = (v) => {
      ok.removeEventListener('click', onOk);
      cancel.removeEventListener('click', onCancel);
      dlg.removeEventListener('cancel', onCancel);
      dlg.close();
      resolve(v);
    };
    const onOk = () => done(true);
    const onCancel = (e) => {
      e?.preventDefault?.();
      done(false);
    };
    ok.addEventListener('click', onOk);
    cancel.addEventListener('click', onCancel);
    dlg.addEventListener('cancel', onCancel);
    dlg.showModal();
    cancel.focus();
  });
}

// --- routing --------------------------------------------------------------------------------------

function route() {
  const parts = location.hash.replace(/^#\/?/, '').split('/').filter(Boolean).map(decodeURIComponent);
  if (parts[0] === 'tenants' && parts[1] && parts[2] === 'events' && parts[3])
    return { view: 'event', tid: parts[1], eid: parts[3] };
  if (parts[0] === 'tenants' && parts[1] && parts[2] === 'endpoints' && parts[3])
    return { view: 'endpoint', tid: parts[1], epid: parts[3] };
  if (parts[0] === 'tenants' && parts[1]) return { view: 'tenant', tid: parts[1] };
  return { view: 'overview' };
}

const enc = encodeURIComponent;
const tenantHref = (tid) => `#/tenants/${enc(tid)}`;
const eventHref = (tid, eid) => `#/tenants/${enc(tid)}/events/${enc(eid)}`;
const endpointHref = (tid, epid) => `#/tenants/${enc(tid)}/endpoints/${enc(epid)}`;
const isAdmin = () => state.session?.kind === 'admin';

function teardown() {
  for (const f of state.cleanup.splice(0)) f();
}

async function render() {
  teardown();
  const seq = ++state.renderSeq;
  const stale = () => seq !== state.renderSeq;
  if (!state.token) return renderSignIn();
  if (!state.session) {
    try {
      state.session = await api('GET', '/console/api/session');
    } catch (err) {
      if (err.status === 401) return signOut(err);
      main.replaceChildren(h('h1', {}, 'Spillway console'), errorView(err));
      retryLater(stale);
      return;
    }
    if (stale()) return;
  }
  renderChrome();
  const r = route();
  const view =
    r.view === 'event'
      ? renderEvent(r, stale)
      : r.view === 'endpoint'
        ? renderEndpoint(r, stale)
        : r.view === 'tenant'
          ? renderTenant(r, stale)
          : renderOverview(stale);
  try {
    await view;
  } catch (err) {
    if (stale()) return;
    if (err.status === 401) return signOut(err);
    main.replaceChildren(
      h('h1', {}, err.status === 403 ? 'Forbidden' : err.status === 404 ? 'Not found' : 'Something failed'),
      errorView(err),
    );
    if (err.status === 503 || err.status === 0) retryLater(stale);
  }
}

/** After a 503 or a lost connection, draws the view again in 2 s (if the user is still on it). */
function retryLater(stale) {
  const t = setTimeout(() => {
    if (!stale()) render();
  }, 2000);
  state.cleanup.push(() => clearTimeout(t));
}

function renderChrome() {
  const s = state.session;
  signoutBtn.hidden = false;
  whoEl.textContent =
    s.kind === 'admin' ? 'Signed in as admin' : `Signed in with a key of tenant ${s.tenantId}`;
  navEl.replaceChildren(
    s.kind === 'admin'
      ? h('a', { href: '#/' }, 'Tenants')
      : h('a', { href: tenantHref(s.tenantId) }, 'My tenant'),
  );
}

function signOut(err) {
  sessionStorage.removeItem(TOKEN_KEY);
  state.token = null;
  state.session = null;
  teardown();
  renderSignIn(err);
}

signoutBtn.addEventListener('click', () => {
  signOut();
  location.hash = '#/';
});

// --- sign in ----------------------------------------------------------------------------------------

function renderSignIn(err) {
  signoutBtn.hidden = true;
  whoEl.textContent = '';
  navEl.replaceChildren();
  const out = outcome();
  if (err) out.error(err);
  const input = h('input', {
    id: 'token',
    name: 'token',
    type: 'password',
    autocomplete: 'off',
    required: true,
  });
  const form = h(
    'form',
    {
      class: 'stack',
      onsubmit: async (e) => {
        e.preventDefault();
        out.clear();
        const token = input.value.trim();
        try {
          const session = await api('GET', '/console/api/session', undefined, token);
          sessionStorage.setItem(TOKEN_KEY, token);
          state.token = token;
          state.session = session;
          if (session.kind === 'tenant' && route().view === 'overview')
            location.hash = tenantHref(session.tenantId);
          else render();
        } catch (e2) {
          out.error(e2);
        }
      },
    },
    h('label', { for: 'token' }, 'Admin token or tenant API key (spk_…)', input),
    h('button', { type: 'submit' }, 'Sign in'),
    out.el,
  );
  main.replaceChildren(
    h(
      'div',
      { class: 'signin' },
      h('h1', {}, 'Sign in'),
      h(
        'p',
        { class: 'note' },
        'The token is kept in this tab only (sessionStorage) and sent in the Authorization header.',
      ),
      form,
    ),
  );
  input.focus();
}

// --- overview -------------------------------------------------------------------------------------

const COLUMNS = [
  ['status', 'Status'],
  ['credits', 'Credits used/limit'],
  ['queued', 'Queued'],
  ['inFlight', 'In flight'],
  ['spilled', 'Spilled'],
  ['retrying', 'Retrying'],
  ['dlq', 'DLQ'],
  ['delivered', 'Delivered'],
  ['failed', 'Failed'],
  ['deliveredRate', 'Delivered/s'],
  ['failedRate', 'Failed/s'],
  ['trend', 'Last minute'],
  ['breaker', 'Worst breaker'],
];

const SVG = 'http://www.w3.org/2000/svg';
const SPARK_POINTS = 60;

/**
 * A tiny throughput sparkline (delivered/s in green, failed/s in red, last minute) drawn as SVG
 * polylines: cheap enough for a thousand rows updated every second, where a chart per row is not.
 */
function sparkline() {
  const svg = document.createElementNS(SVG, 'svg');
  svg.setAttribute('width', '80');
  svg.setAttribute('height', '20');
  svg.setAttribute('viewBox', `0 0 ${SPARK_POINTS - 1} 20`);
  svg.setAttribute('preserveAspectRatio', 'none');
  svg.setAttribute('role', 'img');
  svg.setAttribute('aria-label', 'last minute: no rate yet');
  const base = document.createElementNS(SVG, 'line');
  for (const [k, v] of Object.entries({ x1: 0, x2: SPARK_POINTS - 1, y1: 19.5, y2: 19.5, stroke: '#c4cad3' }))
    base.setAttribute(k, String(v));
  base.setAttribute('vector-effect', 'non-scaling-stroke');
  svg.append(base);
  const ok = document.createElementNS(SVG, 'polyline');
  const bad = document.createElementNS(SVG, 'polyline');
  for (const [line, colour] of [
    [ok, '#116329'],
    [bad, '#a40e26'],
  ]) {
    line.setAttribute('fill', 'none');
    line.setAttribute('stroke', colour);
    line.setAttribute('stroke-width', '1.5');
    line.setAttribute('vector-effect', 'non-scaling-stroke');
    svg.append(line);
  }
  const delivered = [];
  const failed = [];
  const points = (list, peak) => {
    const from = SPARK_POINTS - list.length;
    return list.map((v, i) => `${from + i},${(19 - (v / peak) * 18).toFixed(1)}`).join(' ');
  };
  return {
    svg,
    push(row) {
      if (row.deliveredRate === null) return;
      delivered.push(row.deliveredRate);
      failed.push(row.failedRate ?? 0);
      if (delivered.length > SPARK_POINTS) {
        delivered.shift();
        failed.shift();
      }
      const peak = Math.max(1, ...delivered, ...failed);
      ok.setAttribute('points', points(delivered, peak));
      bad.setAttribute('points', points(failed, peak));
      svg.setAttribute(
        'aria-label',
        `last minute: up to ${fmtRate(Math.max(0, ...delivered))} delivered/s, ${fmtRate(Math.max(0, ...failed))} failed/s`,
      );
    },
  };
}

function cellText(row, key) {
  if (key === 'credits') return `${fmt(row.credits.used)} / ${fmt(row.credits.limit)}`;
  if (key === 'deliveredRate' || key === 'failedRate') return fmtRate(row[key]);
  return fmt(row[key]);
}

/** Numbers are right-aligned; badges and the sparkline are not. */
const cellClass = (k) => (k === 'status' || k === 'breaker' || k === 'trend' ? '' : 'num');

/** The tenants table, updated in place from each snapshot (rows keyed by tenant id). */
function tenantsTable() {
  const tbody = h('tbody');
  const rows = new Map();
  const sparks = new Map();
  const table = headedTable(
    'tenants',
    ['Tenant', ...COLUMNS.map(([k, label]) => h('th', { scope: 'col', class: cellClass(k) }, label))],
    tbody,
    'Every tenant, live (one server-sent snapshot a second)',
  );
  const update = (list) => {
    const seen = new Set();
    list.forEach((row, i) => {
      seen.add(row.id);
      let tr = rows.get(row.id);
      if (!tr) {
        const spark = sparkline();
        tr = h(
          'tr',
          { dataset: { tenant: row.id } },
          h('th', { scope: 'row' }, h('a', { href: tenantHref(row.id) }, row.id)),
          COLUMNS.map(([k]) =>
            h('td', { dataset: { field: k }, class: cellClass(k) }, k === 'trend' ? spark.svg : null),
          ),
        );
        sparks.set(row.id, spark);
        rows.set(row.id, tr);
      }
      if (tbody.children[i] !== tr) tbody.insertBefore(tr, tbody.children[i] ?? null);
      for (const [k] of COLUMNS) {
        if (k === 'trend') continue;
        const td = tr.querySelector(`td[data-field="${k}"]`);
        if (k === 'status' || k === 'breaker') setBadge(td, row[k]);
        else setText(td, cellText(row, k));
      }
      sparks.get(row.id).push(row);
    });
    for (const [id, tr] of rows)
      if (!seen.has(id)) {
        tr.remove();
        rows.delete(id);
        sparks.delete(id);
      }
  };
  return { table, update };
}

function eventLookupForm(fixedTid) {
  const tid = h('input', { id: 'lookup-tenant', name: 'tenant', required: true, value: fixedTid ?? '' });
  const eid = h('input', { id: 'lookup-event', name: 'event', required: true });
  return h(
    'form',
    {
      class: 'inline',
      role: 'search',
      'aria-label': 'Event lookup',
      onsubmit: (e) => {
        e.preventDefault();
        location.hash = eventHref(tid.value.trim(), eid.value.trim());
      },
    },
    fixedTid ? null : h('label', { for: 'lookup-tenant' }, 'Tenant', tid),
    h('label', { for: 'lookup-event' }, 'Event id', eid),
    h('button', { type: 'submit', class: 'secondary' }, 'Find event'),
  );
}

async function renderOverview(stale) {
  if (!isAdmin()) {
    location.hash = tenantHref(state.session.tenantId);
    return;
  }
  const { table, update } = tenantsTable();
  const live = h('span', { class: 'live', 'aria-live': 'off' }, 'connecting…');
  const streamErr = h('div');
  const out = outcome();
  const newId = h('input', { id: 'new-tenant', name: 'id', required: true, pattern: '[A-Za-z0-9_.\\-]+' });
  const newMax = h('input', {
    id: 'new-max',
    name: 'maxInFlight',
    type: 'number',
    min: 1,
    placeholder: '1000',
  });
  const create = actionForm(
    'Create tenant',
    out,
    [labelled('New tenant id', newId), labelled('Max in flight', newMax)],
    async () => {
      const body = { id: newId.value.trim() };
      if (newMax.value) body.limits = { maxInFlight: Number(newMax.value) };
      const t = await api('POST', '/v1/tenants', body);
      location.hash = tenantHref(t.id);
    },
  );
  main.replaceChildren(
    h('h1', {}, 'Tenants ', live),
    streamErr,
    table,
    h('h2', {}, 'Create a tenant'),
    create,
    out.el,
    h('h2', {}, 'Find an event'),
    eventLookupForm(),
  );
  if (stale()) return;
  state.cleanup.push(
    openStream(
      '/console/api/stream',
      (snap) => {
        streamErr.replaceChildren();
        update(snap.tenants);
        setText(live, `${snap.tenants.length} tenants · updated ${new Date(snap.at).toLocaleTimeString()}`);
      },
      (err) => streamErr.replaceChildren(errorView(err)),
    ),
  );
}

// --- tenant page ----------------------------------------------------------------------------------

/** The tenant page's cards: the overview's numbers (its trend and worst breaker are per row only). */
const CARDS = COLUMNS.filter(([k]) => k !== 'trend' && k !== 'breaker');

function section(id, title, ...children) {
  return h('section', { id, 'aria-labelledby': `${id}-h` }, h('h2', { id: `${id}-h` }, title), ...children);
}

/**
 * A small live uPlot chart (client-side history of the stream's snapshots). `series` are
 * [label, colour]; `pick(snap)` gives one value per series (null: a gap), or null to skip the snapshot.
 */
function liveChart(id, title, series, pick, summary) {
  const now = h('span', { class: 'live', id: `${id}-now` });
  const box = h('figure', { class: 'chart', id }, h('figcaption', {}, title, ' ', now));
  const plotBox = h('div', { role: 'img', 'aria-label': title });
  box.append(plotBox);
  const data = [[], ...series.map(() => [])];
  let plot = null;
  const push = (snap) => {
    const values = pick(snap);
    if (values === null) return;
    if (summary) {
      const text = summary(snap);
      if (text) setText(now, text);
    }
    data[0].push(snap.at / 1000);
    values.forEach((v, i) => {
      data[i + 1].push(v);
    });
    if (data[0].length > CHART_POINTS) for (const d of data) d.shift();
    if (!window.uPlot) return;
    if (!plot) {
      plot = new window.uPlot(
        {
          width: Math.max(280, Math.min(560, Math.floor((main.clientWidth - 60) / 2))),
          height: 170,
          series: [{}, ...series.map(([label, stroke]) => ({ label, stroke, width: 2, spanGaps: false }))],
          axes: [{}, { size: 50 }],
          scales: { y: { range: (_u, _min, max) => [0, Math.max(1, max ?? 1)] } },
        },
        data,
        plotBox,
      );
    } else plot.setData(data);
  };
  return { box, push, destroy: () => plot?.destroy() };
}

/** delivered/s and failed/s (rates need two snapshots, so the first is skipped). */
const throughputChart = () =>
  liveChart(
    'throughput-chart',
    'Throughput (per second)',
    [
      ['delivered/s', '#116329'],
      ['failed/s', '#a40e26'],
    ],
    (snap) => (snap.deliveredRate === null ? null : [snap.deliveredRate, snap.failedRate]),
  );

/**
 * Delivery latency of the attempts that ended in each second (p50, p95), which the tenant stream
 * reads from the attempt history; a second without attempts is a gap.
 */
const latencyChart = () =>
  liveChart(
    'latency-chart',
    'Delivery latency (ms, attempts of each second)',
    [
      ['p50 ms', '#0b57d0'],
      ['p95 ms', '#7a4a00'],
    ],
    (snap) => (snap.latency === undefined ? null : [snap.latency?.p50 ?? null, snap.latency?.p95 ?? null]),
    // The last second that had attempts, in words (the chart's canvas is not read by assistive tech).
    (snap) =>
      snap.latency
        ? `last: p50 ${fmt(snap.latency.p50)} ms, p95 ${fmt(snap.latency.p95)} ms, max ${fmt(snap.latency.max)} ms over ${fmt(snap.latency.n)} attempts`
        : '',
  );

async function renderTenant({ tid }, stale) {
  const admin = isAdmin();
  const [tenant, endpoints, sources, keys] = admin
    ? await Promise.all([
        api('GET', `/v1/tenants/${enc(tid)}`),
        api('GET', `/v1/tenants/${enc(tid)}/endpoints`).then((r) => r.data),
        api('GET', `/v1/tenants/${enc(tid)}/sources`).then((r) => r.data),
        api('GET', `/v1/tenants/${enc(tid)}/keys`).then((r) => r.data),
      ])
    : // A tenant key may read its stats and events only; a forged id gets the API's 403 here.
      [
        await api('GET', `/v1/tenants/${enc(tid)}/stats`).then((s) => ({ id: tid, status: s.status })),
        [],
        [],
        [],
      ];
  if (stale()) return;

  const statusEl = h('span', { id: 'tenant-status' }, badge(tenant.status));
  const live = h('span', { class: 'live' }, 'connecting…');
  const cards = new Map();
  const cardGrid = h(
    'div',
    { class: 'cards', id: 'stats' },
    CARDS.map(([k, label]) => {
      const v = h('div', { class: 'value', dataset: { field: k } }, '–');
      cards.set(k, v);
      return h('div', { class: 'card' }, h('div', { class: 'label' }, label), v);
    }),
  );
  const chart = throughputChart();
  const latency = latencyChart();
  state.cleanup.push(chart.destroy, latency.destroy);
  const streamErr = h('div');

  // Pause / resume, with a confirmation.
  const pauseOut = outcome();
  let status = tenant.status;
  const pauseBtn = h('button', { type: 'button', id: 'pause-toggle', class: 'danger' });
  const drawPause = () => {
    pauseBtn.textContent = status === 'paused' ? 'Resume tenant' : 'Pause tenant';
    pauseBtn.className = status === 'paused' ? '' : 'danger';
  };
  drawPause();
  pauseBtn.addEventListener('click', () => {
    const action = status === 'paused' ? 'resume' : 'pause';
    return confirmed(
      action === 'pause'
        ? [
            `Pause tenant ${tid}?`,
            'Events are still accepted and kept durably (spilled to Kafka); nothing is delivered until you resume.',
            'Pause',
          ]
        : [
            `Resume tenant ${tid}?`,
            'Everything kept while paused is delivered, within the tenant’s limits.',
            'Resume',
          ],
      pauseOut,
      async () => {
        const r = await api('POST', `/v1/tenants/${enc(tid)}/${action}`);
        status = r.status;
        drawPause();
        statusEl.replaceChildren(badge(r.status));
        pauseOut.ok(`Tenant ${r.status === 'paused' ? 'paused' : 'resumed'}.`);
      },
    );
  });

  // Live numbers per endpoint (breaker, rates) go into the endpoints table.
  const epLive = new Map();
  const epRow = (ep) => {
    const cells = {
      breaker: h('td', { dataset: { field: 'breaker' } }, '–'),
      delivered: h('td', { class: 'num', dataset: { field: 'delivered' } }, '–'),
      failed: h('td', { class: 'num', dataset: { field: 'failed' } }, '–'),
      deliveredRate: h('td', { class: 'num', dataset: { field: 'deliveredRate' } }, '–'),
    };
    epLive.set(ep.id, cells);
    return cells;
  };

  const onSnapshot = (snap) => {
    streamErr.replaceChildren();
    for (const [k, el] of cards) {
      if (k === 'status') setBadge(el, snap.status);
      else setText(el, cellText(snap, k));
    }
    if (snap.status !== status) {
      status = snap.status;
      drawPause();
      statusEl.replaceChildren(badge(status));
    }
    for (const e of snap.endpoints) {
      const c = epLive.get(e.id);
      if (!c) continue;
      setBadge(c.breaker, e.breaker);
      setText(c.delivered, fmt(e.delivered));
      setText(c.failed, fmt(e.failed));
      setText(c.deliveredRate, fmtRate(e.deliveredRate));
    }
    if (!admin) readOnlyEndpoints.update(snap.endpoints);
    chart.push(snap);
    latency.push(snap);
    dlqView?.progress(snap.dlq);
    setText(live, `updated ${new Date(snap.at).toLocaleTimeString()}`);
  };

  const readOnlyEndpoints = readOnlyEndpointTable(epRow);
  let dlqView = null;
  const parts = [
    h('h1', {}, `Tenant ${tid}`, statusEl, admin ? pauseBtn : null, live),
    pauseOut.el,
    streamErr,
    cardGrid,
    h('div', { class: 'charts' }, chart.box, latency.box),
  ];
  if (admin) {
    dlqView = dlqSection(tid, endpoints);
    parts.push(
      limitsSection(tid, tenant),
      endpointsSection(tid, endpoints, epRow),
      sourcesSection(tid, sources),
      keysSection(tid, keys),
      dlqView.el,
    );
  } else {
    parts.push(
      section(
        'endpoints',
        'Endpoints',
        h('p', { class: 'note' }, 'A tenant API key sees its stats and events, read-only.'),
        readOnlyEndpoints.table,
      ),
    );
  }
  const events = eventLogSection(tid);
  parts.push(section('lookup', 'Find an event', eventLookupForm(tid)), events.el);
  main.replaceChildren(...parts);
  // The event log reads Kafka: the live numbers do not wait for it.
  void events.load();
  if (admin) await dlqView.load();
  if (stale()) return;
  state.cleanup.push(
    openStream(`/console/api/tenants/${enc(tid)}/stream`, onSnapshot, (err, final) => {
      streamErr.replaceChildren(errorView(err));
      if (final && err.status === 403) main.replaceChildren(h('h1', {}, 'Forbidden'), errorView(err));
    }),
  );
}

function readOnlyEndpointTable(epRow) {
  const tbody = h('tbody');
  const known = new Set();
  const table = headedTable(
    'endpoints-table',
    ['Endpoint', 'Breaker', 'Delivered', 'Failed', 'Delivered/s'],
    tbody,
  );
  return {
    table,
    update(list) {
      for (const e of list) {
        if (known.has(e.id)) continue;
        known.add(e.id);
        const c = epRow(e);
        tbody.append(
          h(
            'tr',
            { dataset: { endpoint: e.id } },
            h('th', { scope: 'row' }, e.id),
            c.breaker,
            c.delivered,
            c.failed,
            c.deliveredRate,
          ),
        );
      }
    },
  };
}

function numInput(id, label, value, attrs = {}) {
  const input = h('input', { id, name: id, type: 'number', min: 1, value: value ?? '', ...attrs });
  return { input, label: labelled(label, input) };
}

function limitsSection(tid, tenant) {
  const l = tenant.limits;
  const max = numInput('limit-max', 'Max in flight (credits)', l.maxInFlight, { required: true });
  const conc = numInput('limit-concurrency', 'Concurrency per worker', l.concurrency, { required: true });
  const rps = numInput('limit-rate', 'Rate per second (empty = unlimited)', l.rate?.perSecond);
  const burst = numInput('limit-burst', 'Burst', l.rate?.burst);
  const out = outcome();
  const form = actionForm(
    'Limits',
    out,
    [max.label, conc.label, rps.label, burst.label],
    async () => {
      const limits = { maxInFlight: Number(max.input.value), concurrency: Number(conc.input.value) };
      if (rps.input.value)
        limits.rate = {
          perSecond: Number(rps.input.value),
          burst: Number(burst.input.value || rps.input.value),
        };
      else limits.rate = null;
      const t = await api('PATCH', `/v1/tenants/${enc(tid)}`, { limits });
      out.ok(
        `Saved: max in flight ${fmt(t.limits.maxInFlight)}, concurrency ${fmt(t.limits.concurrency)}, rate ${
          t.limits.rate
            ? `${fmt(t.limits.rate.perSecond)}/s (burst ${fmt(t.limits.rate.burst)})`
            : 'unlimited'
        }.`,
      );
    },
    'Save limits',
  );
  return section('limits', 'Limits', form, out.el);
}

function endpointsSection(tid, endpoints, epRow) {
  const out = outcome();
  const tbody = h('tbody');
  const row = (ep) => {
    const c = epRow(ep);
    const statusCell = h(
      'td',
      { dataset: { field: 'status' } },
      badge(ep.status === 'paused' && ep.disabledReason ? 'disabled' : ep.status),
      ep.disabledReason ? h('div', { class: 'note' }, ep.disabledReason) : null,
    );
    const urlInput = h('input', {
      id: `ep-url-${ep.id}`,
      name: 'url',
      value: ep.url,
      size: 34,
      'aria-label': `URL of endpoint ${ep.id}`,
    });
    const toggle = h(
      'button',
      { type: 'button', class: 'secondary' },
      ep.status === 'paused' ? 'Resume' : 'Pause',
    );
    toggle.setAttribute('aria-label', `${ep.status === 'paused' ? 'Resume' : 'Pause'} endpoint ${ep.id}`);
    toggle.addEventListener('click', () =>
      attempt(out, async () => {
        const action = ep.status === 'paused' ? 'resume' : 'pause';
        const r = await api('POST', `/v1/tenants/${enc(tid)}/endpoints/${enc(ep.id)}/${action}`);
        ep.status = r.status;
        if (r.status === 'active') delete ep.disabledReason;
        tr.replaceWith(row(ep));
        out.ok(`Endpoint ${ep.id} ${r.status === 'active' ? 'resumed' : 'paused'}.`);
      }),
    );
    const saveUrl = h(
      'button',
      {
        type: 'button',
        class: 'secondary',
        'aria-label': `Save URL of endpoint ${ep.id}`,
        onclick: () =>
          attempt(out, async () => {
            const r = await api('PATCH', `/v1/tenants/${enc(tid)}/endpoints/${enc(ep.id)}`, {
              url: urlInput.value.trim(),
            });
            ep.url = r.url;
            out.ok(`Endpoint ${ep.id} now delivers to ${r.url}.`);
          }),
      },
      'Save URL',
    );
    const tr = h(
      'tr',
      { dataset: { endpoint: ep.id } },
      h('th', { scope: 'row' }, h('a', { href: endpointHref(tid, ep.id) }, ep.id)),
      h('td', {}, urlInput, ' ', saveUrl),
      statusCell,
      c.breaker,
      h('td', { class: 'num' }, ep.rate ? `${fmt(ep.rate.perSecond)}/s` : 'unlimited'),
      c.delivered,
      c.failed,
      c.deliveredRate,
      h('td', {}, h('div', { class: 'actions' }, toggle)),
    );
    return tr;
  };
  for (const ep of endpoints) tbody.append(row(ep));

  const url = h('input', { id: 'new-ep-url', name: 'url', type: 'url', required: true, size: 36 });
  const id = optionalId('new-ep-id');
  const types = h('input', { id: 'new-ep-types', name: 'eventTypes', placeholder: '*' });
  const form = actionForm(
    'Add endpoint',
    out,
    [labelled('URL', url), labelled('Id', id), labelled('Event types (comma-separated)', types)],
    async () => {
      const body = { url: url.value.trim() };
      if (id.value.trim()) body.id = id.value.trim();
      if (types.value.trim())
        body.eventTypes = types.value
          .split(',')
          .map((s) => s.trim())
          .filter(Boolean);
      const ep = await api('POST', `/v1/tenants/${enc(tid)}/endpoints`, body);
      tbody.append(row(ep));
      out.ok(
        `Endpoint ${ep.id} added. Its signing secret (shown once here): `,
        h('span', { class: 'secret' }, ep.secret),
      );
      form.reset();
    },
  );
  const table = headedTable(
    'endpoints-table',
    ['Endpoint', 'URL', 'Status', 'Breaker', 'Rate limit', 'Delivered', 'Failed', 'Delivered/s', 'Actions'],
    tbody,
  );
  return section('endpoints', 'Endpoints', table, form, out.el);
}

function sourcesSection(tid, sources) {
  const out = outcome();
  const base =
    state.session.ingestPort && state.session.ingestPort !== 0
      ? `${location.protocol}//${location.hostname}:${state.session.ingestPort}`
      : '';
  const tbody = h('tbody');
  const row = (s) =>
    h(
      'tr',
      { dataset: { source: s.id } },
      h('th', { scope: 'row' }, s.id),
      h('td', {}, s.kind),
      h('td', { dataset: { field: 'ingestUrl' } }, h('code', {}, `${base}${s.ingestPath}`)),
      h('td', {}, s.allowCidrs?.join(', ') ?? 'any'),
      h('td', { class: 'num' }, fmt(s.maxBodyBytes)),
    );
  for (const s of sources) tbody.append(row(s));
  const kind = h(
    'select',
    { id: 'new-src-kind', name: 'kind' },
    ['github', 'stripe', 'shopify', 'standard'].map((k) => h('option', { value: k }, k)),
  );
  const secret = h('input', { id: 'new-src-secret', name: 'secret', type: 'password', required: true });
  const id = optionalId('new-src-id');
  const form = actionForm(
    'Add source',
    out,
    [labelled('Kind', kind), labelled('Id', id), labelled('Signing secret', secret)],
    async () => {
      const body = { kind: kind.value, secret: secret.value };
      if (id.value.trim()) body.id = id.value.trim();
      const s = await api('POST', `/v1/tenants/${enc(tid)}/sources`, body);
      tbody.append(row(s));
      out.ok(`Source ${s.id} added: providers post to ${base}${s.ingestPath}.`);
      form.reset();
    },
  );
  const table = headedTable(
    'sources-table',
    ['Source', 'Kind', 'Ingest URL', 'Allowed clients', 'Max body bytes'],
    tbody,
  );
  return section('sources', 'Sources', table, form, out.el);
}

function keysSection(tid, keys) {
  const out = outcome();
  const tbody = h('tbody');
  const row = (k) => {
    const tr = h(
      'tr',
      { dataset: { key: k.id } },
      h('th', { scope: 'row' }, k.id),
      h('td', {}, k.name ?? ''),
      h('td', {}, new Date(k.createdAt).toLocaleString()),
      h(
        'td',
        {},
        h(
          'button',
          {
            type: 'button',
            class: 'danger',
            'aria-label': `Revoke key ${k.id}`,
            onclick: () =>
              confirmed(
                [`Revoke key ${k.id}?`, 'Requests with this key are refused from now on.', 'Revoke'],
                out,
                async () => {
                  await api('DELETE', `/v1/tenants/${enc(tid)}/keys/${enc(k.id)}`);
                  tr.remove();
                  out.ok(`Key ${k.id} revoked.`);
                },
              ),
          },
          'Revoke',
        ),
      ),
    );
    return tr;
  };
  for (const k of keys) tbody.append(row(k));
  const name = h('input', { id: 'new-key-name', name: 'name' });
  const form = actionForm(
    'Create API key',
    out,
    [labelled('Name', name)],
    async () => {
      const k = await api(
        'POST',
        `/v1/tenants/${enc(tid)}/keys`,
        name.value.trim() ? { name: name.value.trim() } : {},
      );
      tbody.append(row(k));
      out.ok(
        `Key ${k.id} created. Copy it now, it is not shown again: `,
        h('span', { class: 'secret', id: 'new-key-value' }, k.key),
      );
      form.reset();
    },
    'Create key',
  );
  const table = headedTable('keys-table', ['Key', 'Name', 'Created', 'Actions'], tbody);
  return section('keys', 'API keys', table, form, out.el);
}

/**
 * Paging over an API page (`{data, next}`), on the server: *Next page* reads the page after
 * `next`, *Previous page* reads again with the cursor the previous page was read with.
 * `fetchPage(cursor)` returns a page; the pager fills `view.tbody` with `view.rows(page, cursor)`
 * (called for every page read), or with one row of `view.empty` (spanning `view.colspan` columns)
 * when there is none, and shows `view.info(page, cursor)` beside its buttons for a page that is
 * not empty. Errors go to `out`.
 */
function cursorPager(id, what, out, fetchPage, view) {
  const prev = h(
    'button',
    { type: 'button', class: 'secondary', 'aria-label': `Previous page of ${what}` },
    'Previous page',
  );
  const next = h(
    'button',
    { type: 'button', class: 'secondary', 'aria-label': `Next page of ${what}` },
    'Next page',
  );
  const info = h('span', { class: 'note', id: `${id}-info` });
  const draw = (page, cursor) => {
    const rows = view.rows(page, cursor);
    const empty = rows.length === 0;
    view.tbody.replaceChildren(
      ...(empty ? [h('tr', {}, h('td', { colspan: view.colspan, class: 'note' }, view.empty))] : rows),
    );
    setText(info, empty ? '' : view.info(page, cursor));
  };
  let stack = [undefined];
  let after;
  let seq = 0;
  const buttons = () => {
    prev.disabled = stack.length === 1;
    next.disabled = after === undefined;
  };
  /** Reads the last page of `to` (the cursors of the pages up to it); `to` becomes the stack once read. */
  const show = async (to = stack) => {
    const mine = ++seq;
    prev.disabled = true;
    next.disabled = true;
    const cursor = to.at(-1);
    let page;
    try {
      page = await fetchPage(cursor);
    } catch (err) {
      // The page shown stays, and so do the buttons that lead from it.
      if (mine === seq) buttons();
      throw err;
    }
    if (mine !== seq) return;
    stack = to;
    after = page.next;
    draw(page, cursor);
    buttons();
  };
  const go = (to) => {
    out.clear();
    show(to).catch((err) => out.error(err));
  };
  prev.addEventListener('click', () => go(stack.slice(0, -1)));
  next.addEventListener('click', () => go([...stack, after]));
  return {
    el: h('div', { class: 'pager' }, prev, next, info),
    /** Reads the current page again. */
    reload: () => show(),
    atFirst: () => stack.length === 1,
    /** Back to the first page, and reads it. */
    first: () => show([undefined]),
  };
}

/**
 * The DLQ, paged on the server (`GET .../dlq?cursor=`), filtered by endpoint, with replay and purge
 * (each confirmed). The API answers a replay when it is done; while it runs, the progress bar
 * follows the DLQ length that the live stream reports. A changed length re-reads the current page.
 */
function dlqSection(tid, endpoints) {
  const out = outcome();
  let total = 0;
  let replay = null; // { start }
  let lastDlq = null;
  let loading = null;
  const filter = h(
    'select',
    { id: 'dlq-endpoint', name: 'endpoint' },
    h('option', { value: '' }, 'all endpoints'),
    endpoints.map((e) => h('option', { value: e.id }, e.id)),
  );
  const tbody = h('tbody');
  const progress = h('progress', {
    id: 'dlq-progress',
    max: 1,
    value: 0,
    hidden: true,
    'aria-label': 'Replay progress',
  });
  const progressText = h('span', { id: 'dlq-progress-text', 'aria-live': 'polite' });
  const endpointQuery = () => (filter.value ? `&endpointId=${enc(filter.value)}` : '');
  const pager = cursorPager(
    'dlq',
    'dead letters',
    out,
    (cursor) =>
      api(
        'GET',
        `/v1/tenants/${enc(tid)}/dlq?limit=${DLQ_PAGE}${cursor ? `&cursor=${enc(cursor)}` : ''}${endpointQuery()}`,
      ),
    {
      tbody,
      colspan: 5,
      empty: 'The DLQ is empty.',
      rows: (page) => {
        total = page.total;
        return page.data.map((d) =>
          h(
            'tr',
            { dataset: { event: d.eventId, endpoint: d.endpointId } },
            h('td', {}, h('a', { href: eventHref(tid, d.eventId) }, d.eventId)),
            h('td', {}, d.endpointId),
            h('td', { class: 'num' }, fmt(d.attempts)),
            h('td', {}, d.lastError),
            h('td', {}, fmtTime(d.failedAt)),
          ),
        );
      },
      info: (page, cursor) => {
        const from = Number(cursor ?? 0);
        return `Entries ${from + 1}–${from + page.data.length} of ${fmt(total)}`;
      },
    },
  );
  /** The current page again; the first page when the current one emptied (a replay, a purge). */
  const load = async () => {
    await pager.reload();
    if (tbody.querySelector('a') === null && total > 0) await pager.first();
  };
  filter.addEventListener('change', () => {
    out.clear();
    pager.first().catch((err) => out.error(err));
  });
  const replayBtn = h('button', { type: 'button', id: 'dlq-replay' }, 'Replay');
  replayBtn.addEventListener('click', async () => {
    const endpointId = filter.value || undefined;
    const ok = await confirmDialog(
      `Replay the DLQ${endpointId ? ` of endpoint ${endpointId}` : ''}?`,
      'Every entry starts a fresh attempt schedule through the normal credit/spill path.',
      'Replay',
    );
    if (!ok) return;
    out.clear();
    replay = { start: null };
    progress.hidden = false;
    progress.removeAttribute('value');
    progressText.textContent = 'Replaying…';
    replayBtn.disabled = true;
    try {
      const r = await api('POST', `/v1/tenants/${enc(tid)}/dlq/replay`, endpointId ? { endpointId } : {});
      progress.max = Math.max(1, r.replayed);
      progress.value = r.replayed;
      progressText.textContent = `Replayed ${fmt(r.replayed)} of ${fmt(r.replayed)}.`;
      out.ok(`Replayed ${fmt(r.replayed)} entries.`);
      await load();
    } catch (err) {
      out.error(err);
      progressText.textContent = '';
    } finally {
      replay = null;
      replayBtn.disabled = false;
    }
  });
  const purgeBtn = h('button', { type: 'button', id: 'dlq-purge', class: 'danger' }, 'Purge');
  purgeBtn.addEventListener('click', () => {
    const endpointId = filter.value || undefined;
    return confirmed(
      [
        `Purge the DLQ${endpointId ? ` of endpoint ${endpointId}` : ''}?`,
        `Its ${fmt(total)} entries are deleted for good and never delivered. This cannot be undone.`,
        'Purge',
      ],
      out,
      async () => {
        const r = await api(
          'DELETE',
          `/v1/tenants/${enc(tid)}/dlq${endpointId ? `?endpointId=${enc(endpointId)}` : ''}`,
        );
        out.ok(`Purged ${fmt(r.purged)} entries.`);
        await pager.first();
      },
    );
  });
  const el = section(
    'dlq',
    'Dead letters',
    h(
      'div',
      { class: 'inline actions' },
      h('label', { for: 'dlq-endpoint' }, 'Endpoint ', filter),
      replayBtn,
      purgeBtn,
      progress,
      progressText,
    ),
    headedTable('dlq-table', ['Event', 'Endpoint', 'Attempts', 'Last error', 'Failed at'], tbody),
    pager.el,
    out.el,
  );
  return {
    el,
    load: () => pager.first(),
    /**
     * Called with each live DLQ length. While a replay runs, progress = how much has left the DLQ;
     * otherwise a changed length re-reads the page (at most one read at a time, so ≤ 1 a second).
     */
    progress(dlq) {
      if (!replay) {
        if (dlq !== lastDlq && !loading) {
          lastDlq = dlq;
          loading = load()
            .catch((err) => out.error(err))
            .finally(() => {
              loading = null;
            });
        }
        return;
      }
      if (replay.start === null) {
        replay.start = Math.max(dlq, total);
        progress.max = Math.max(1, replay.start);
      }
      const done = Math.max(0, replay.start - dlq);
      progress.value = done;
      progressText.textContent = `Replaying: ${fmt(done)} of ${fmt(replay.start)}`;
    },
  };
}

// --- event log ------------------------------------------------------------------------------------

const STATUSES = ['pending', 'delivered', 'retrying', 'failed'];

/**
 * The event log (`GET .../events`): newest first, filtered by time, type and status, paged on the
 * server. Read when the page opens and when the filters are applied, never polled.
 */
function eventLogSection(tid) {
  const out = outcome();
  const since = h('input', { id: 'events-since', name: 'since', type: 'datetime-local', step: 1 });
  const until = h('input', { id: 'events-until', name: 'until', type: 'datetime-local', step: 1 });
  const type = h('input', { id: 'events-type', name: 'type', placeholder: 'any', size: 16 });
  const status = h(
    'select',
    { id: 'events-status', name: 'status' },
    h('option', { value: '' }, 'any'),
    STATUSES.map((x) => h('option', { value: x }, x)),
  );
  const tbody = h('tbody');
  let query = '';
  let filtered = '';
  const pager = cursorPager(
    'events',
    'events',
    out,
    (cursor) =>
      api(
        'GET',
        `/v1/tenants/${enc(tid)}/events?limit=${EVENTS_PAGE}${query}${cursor ? `&cursor=${enc(cursor)}` : ''}`,
      ),
    {
      tbody,
      colspan: 5,
      empty: 'No event matches.',
      rows: (page) =>
        page.data.map((e) =>
          h(
            'tr',
            { dataset: { event: e.id } },
            h('th', { scope: 'row' }, h('a', { href: eventHref(tid, e.id) }, e.id)),
            h('td', {}, e.type),
            h('td', {}, fmtTime(e.receivedAt)),
            h('td', { dataset: { field: 'status' } }, badge(e.status)),
            h('td', {}, e.endpoints.join(', ')),
          ),
        ),
      info: (page, cursor) =>
        `${cursor ? 'Older events' : 'Newest events'}${filtered}: ${fmt(page.data.length)} shown${page.next ? ', more on the next page' : ''}`,
    },
  );
  const form = actionForm(
    'Filter events',
    out,
    [labelled('Since', since), labelled('Until', until), labelled('Type', type), labelled('Status', status)],
    async () => {
      const q = new URLSearchParams();
      const s = fromLocalInput(since.value);
      const u = fromLocalInput(until.value);
      if (s) q.set('since', s);
      if (u) q.set('until', u);
      if (type.value.trim()) q.set('type', type.value.trim());
      if (status.value) q.set('status', status.value);
      query = q.size ? `&${q}` : '';
      const desc = [...q].map(([k, v]) => `${k} ${v}`).join(', ');
      filtered = desc ? ` (${desc})` : '';
      await pager.first();
    },
    'Show events',
  );
  return {
    el: section(
      'events',
      'Event log',
      form,
      headedTable(
        'events-table',
        ['Event', 'Type', 'Received', 'Status', 'Endpoints'],
        tbody,
        'Newest first',
      ),
      pager.el,
      out.el,
    ),
    /** The first page; its error stays in this section (the rest of the page works without it). */
    load: () => pager.first().catch((err) => out.error(err)),
  };
}

// --- resend, recover and their progress -------------------------------------------------------------

/**
 * Follows a resend or recover operation (`GET .../operations/:id`) once a second until all its
 * deliveries ended, in a progress bar: how many of them were delivered or failed again.
 */
function operationProgress() {
  const bar = h('progress', {
    id: 'op-progress',
    max: 1,
    value: 0,
    hidden: true,
    'aria-label': 'Operation progress',
  });
  const text = h('span', { id: 'op-progress-text', 'aria-live': 'polite' });
  let timer = null;
  const stop = () => {
    clearTimeout(timer);
    timer = null;
  };
  state.cleanup.push(stop);
  const what = (op) =>
    op.kind === 'recover'
      ? `Recover of ${op.endpointId} since ${fmtTime(op.since)}`
      : `Resend of ${op.eventId}${op.endpointId ? ` to ${op.endpointId}` : ''}`;
  const draw = (op) => {
    const ended = op.delivered + op.failed;
    bar.hidden = false;
    bar.max = Math.max(1, op.total);
    bar.value = op.total === 0 ? 1 : ended;
    const counts = `${fmt(op.delivered)} delivered, ${fmt(op.failed)} failed again, of ${fmt(op.total)}`;
    text.textContent =
      op.state === 'failed'
        ? `${what(op)} stopped: ${op.error ?? 'failed'} (${counts}).`
        : op.state === 'running'
          ? `${what(op)}: handing ${fmt(op.enqueued)} of ${fmt(op.total)} to the queue…`
          : ended >= op.total
            ? `${what(op)}: done, ${counts}.`
            : `${what(op)}: ${counts}…`;
    return op.state === 'failed' || (op.state === 'enqueued' && ended >= op.total);
  };
  return {
    el: h('div', { class: 'inline actions' }, bar, text),
    /** Shows `op` and reads it again every second until it is done; `onTick` runs after each read. */
    follow(tid, op, onTick) {
      stop();
      const tick = async (o) => {
        const done = draw(o);
        onTick?.(o);
        if (done) return;
        timer = setTimeout(async () => {
          try {
            await tick(await api('GET', `/v1/tenants/${enc(tid)}/operations/${enc(o.id)}`));
          } catch (err) {
            text.replaceChildren(errorView(err));
            // A 503 is shown by the banner: keep following once Redis is back.
            if (err.status === 503 || err.status === 0) timer = setTimeout(() => tick(o), 2000);
          }
        }, OPERATION_POLL_MS);
      };
      tick(op);
    },
  };
}

/**
 * Sends an idempotent POST (resend, recover): the request id is kept until the API answered, so
 * trying again after a lost answer (a 503, a dropped connection) cannot start the work twice.
 */
function idempotent() {
  let id = null;
  return async (method, path, body) => {
    id ??= newRequestId();
    try {
      const r = await api(method, path, { ...body, requestId: id });
      id = null;
      return r;
    } catch (err) {
      if (err.status !== 503 && err.status !== 0) id = null;
      throw err;
    }
  };
}

/** A resend of the event to one endpoint, or to every endpoint it went to (confirmed). */
function resendButton(tid, eid, endpointId, out, progress, onStarted) {
  const send = idempotent();
  return h(
    'button',
    {
      type: 'button',
      class: endpointId ? 'secondary' : '',
      'aria-label': endpointId ? `Resend to endpoint ${endpointId}` : null,
      onclick: () =>
        confirmed(
          [
            endpointId ? `Resend event ${eid} to ${endpointId}?` : `Resend event ${eid} to every endpoint?`,
            'A fresh delivery (attempt 1) through the normal credit/spill path, even where it was delivered before.',
            'Resend',
          ],
          out,
          async () => {
            const op = await send(
              'POST',
              `/v1/tenants/${enc(tid)}/events/${enc(eid)}/resend`,
              endpointId ? { endpointId } : {},
            );
            out.ok(
              `Resend ${op.id} started: ${fmt(op.total)} ${op.total === 1 ? 'delivery' : 'deliveries'}.`,
            );
            onStarted?.();
            progress.follow(tid, op, onStarted);
          },
        ),
    },
    endpointId ? 'Resend' : 'Resend to all endpoints',
  );
}

/** "Recover since T" on one endpoint (admin): resends every delivery that failed for good since T. */
function recoverForm(tid, endpointId, sinceMs, out, progress, onTick) {
  const since = h('input', {
    id: `recover-since-${endpointId}`,
    name: 'since',
    type: 'datetime-local',
    step: 1,
    required: true,
    value: toLocalInput(sinceMs),
  });
  const send = idempotent();
  return actionForm(
    `Recover endpoint ${endpointId}`,
    out,
    [labelled(`Failed deliveries to ${endpointId} since (local time)`, since)],
    async () => {
      const at = fromLocalInput(since.value);
      const ok = await confirmDialog(
        `Recover endpoint ${endpointId} since ${fmtTime(at)}?`,
        'Every delivery to it that failed for good since then is sent again with a fresh attempt schedule; its dead letters leave the DLQ.',
        'Recover',
      );
      if (!ok) return;
      const op = await send('POST', `/v1/tenants/${enc(tid)}/endpoints/${enc(endpointId)}/recover`, {
        since: at,
      });
      out.ok(`Recover ${op.id} started.`);
      progress.follow(tid, op, onTick);
    },
    `Recover ${endpointId}`,
  );
}

// --- attempts -------------------------------------------------------------------------------------

/** What one attempt came to, as a badge: delivered, retrying (another attempt is due) or failed. */
function outcomeBadge(a) {
  if (a.status === 'delivered') return badge('delivered');
  if (a.deadLettered) return badge('failed · dead-lettered', 'failed');
  return a.nextAt ? badge('failed · retrying', 'retrying') : badge('failed');
}

/** A table of attempts (newest first), paged on the server; `withEvent` adds the event column. */
function attemptsTable(id, tid, out, fetchPage, { withEvent = false, withEndpoint = true } = {}) {
  const tbody = h('tbody');
  const pager = cursorPager(id, 'attempts', out, fetchPage, {
    tbody,
    colspan: 9,
    empty: 'No attempt recorded yet.',
    rows: (page) =>
      page.data.map((a) =>
        h(
          'tr',
          {
            dataset: {
              endpoint: a.endpointId,
              event: a.eventId,
              attempt: a.attempt,
              outcome: a.status,
            },
          },
          h('td', {}, fmtTime(a.at)),
          withEvent ? h('td', {}, h('a', { href: eventHref(tid, a.eventId) }, a.eventId)) : null,
          withEndpoint ? h('td', {}, a.endpointId) : null,
          h('td', { class: 'num', dataset: { field: 'attempt' } }, a.attempt),
          h('td', { dataset: { field: 'outcome' } }, outcomeBadge(a)),
          h(
            'td',
            { dataset: { field: 'answer' } },
            [a.httpStatus, a.error && a.error !== `http_${a.httpStatus}` ? a.error : null]
              .filter((x) => x !== undefined && x !== null)
              .join(' · ') || '–',
          ),
          h('td', { class: 'num', dataset: { field: 'latency' } }, `${fmt(a.latencyMs)} ms`),
          h(
            'td',
            { dataset: { field: 'response' } },
            a.response ? h('code', { class: 'excerpt' }, a.response) : '',
          ),
          h(
            'td',
            { class: 'note' },
            a.operation ? `by ${a.operation}` : a.nextAt ? `next ${fmtTime(a.nextAt)}` : '',
          ),
        ),
      ),
    info: (page, cursor) =>
      `${cursor ? 'Older attempts' : 'Newest attempts'}: ${fmt(page.data.length)} shown`,
  });
  const columns = [
    'Time',
    withEvent ? 'Event' : null,
    withEndpoint ? 'Endpoint' : null,
    h('th', { scope: 'col', class: 'num' }, 'Attempt'),
    'Outcome',
    'HTTP status / error',
    h('th', { scope: 'col', class: 'num' }, 'Latency'),
    'Response (excerpt)',
    'Note',
  ].filter(Boolean);
  return {
    el: h('div', {}, headedTable(`${id}-table`, columns, tbody, 'Newest first'), pager.el),
    pager,
  };
}

// --- event page -----------------------------------------------------------------------------------

/** GETs what a view shows; undefined when the user moved on to another view meanwhile. */
async function readUnlessStale(path, stale) {
  const item = await api('GET', path);
  return stale() ? undefined : item;
}

/** What an event or endpoint page reports into: its action outcome, its attempts' outcome, an operation's progress. */
function actionWidgets() {
  return { out: outcome(), attemptsOut: outcome(), progress: operationProgress() };
}

async function renderEvent({ tid, eid }, stale) {
  const ev = await readUnlessStale(`/v1/tenants/${enc(tid)}/events/${enc(eid)}`, stale);
  if (!ev) return;
  const admin = isAdmin();
  const { out, attemptsOut, progress } = actionWidgets();
  const tbody = h('tbody');
  // After an action, keep re-reading for a while even if the event looked final before it.
  let watchUntil = 0;
  const watch = () => {
    watchUntil = Date.now() + 60_000;
  };
  const drawRows = (e) => {
    tbody.replaceChildren(
      ...e.deliveries.map((d) =>
        h(
          'tr',
          { dataset: { endpoint: d.endpointId } },
          h(
            'th',
            { scope: 'row' },
            admin ? h('a', { href: endpointHref(tid, d.endpointId) }, d.endpointId) : d.endpointId,
          ),
          h('td', { dataset: { field: 'status' } }, badge(d.status)),
          h('td', { class: 'num', dataset: { field: 'attempts' } }, fmt(d.attempts)),
          h('td', { class: 'num', dataset: { field: 'lastStatus' } }, d.lastStatus ?? '–'),
          h('td', { dataset: { field: 'lastError' } }, d.lastError ?? ''),
          h('td', {}, resendButton(tid, eid, d.endpointId, out, progress, watch)),
        ),
      ),
    );
  };
  const attempts = attemptsTable('attempts', tid, attemptsOut, (cursor) =>
    api(
      'GET',
      `/v1/tenants/${enc(tid)}/events/${enc(eid)}/attempts?limit=${ATTEMPTS_PAGE}${cursor ? `&cursor=${enc(cursor)}` : ''}`,
    ),
  );
  const refreshed = h('span', { class: 'live' });
  const isFinal = (e) => e.deliveries.every((d) => d.status === 'delivered' || d.status === 'failed');
  let final = isFinal(ev);
  const refresh = async () => {
    try {
      const e = await api('GET', `/v1/tenants/${enc(tid)}/events/${enc(eid)}`);
      if (stale()) return;
      drawRows(e);
      final = isFinal(e);
      // Newer attempts come first: re-read the attempts only while their first page is shown.
      if (attempts.pager.atFirst()) await attempts.pager.reload();
      setText(refreshed, `updated ${new Date().toLocaleTimeString()}`);
    } catch (err) {
      out.error(err);
    }
  };
  drawRows(ev);
  // While some delivery is not final, re-read this one event every 2 s (one small GET per open page).
  const timer = setInterval(() => {
    if (!document.hidden && (!final || Date.now() < watchUntil)) refresh();
  }, 2000);
  state.cleanup.push(() => clearInterval(timer));
  // "Recover since" for each endpoint whose delivery failed, from a minute before the event came.
  const failed = ev.deliveries.filter((d) => d.status === 'failed').map((d) => d.endpointId);
  const recoverOut = outcome();
  main.replaceChildren(
    h('p', {}, h('a', { href: tenantHref(tid) }, `← Tenant ${tid}`)),
    h('h1', {}, `Event ${ev.id}`, refreshed),
    h(
      'dl',
      { class: 'cards' },
      h('div', { class: 'card' }, h('dt', { class: 'label' }, 'Type'), h('dd', { class: 'value' }, ev.type)),
      h(
        'div',
        { class: 'card' },
        h('dt', { class: 'label' }, 'Received'),
        h('dd', { class: 'value' }, fmtTime(ev.receivedAt)),
      ),
    ),
    section(
      'deliveries',
      'Deliveries per endpoint',
      headedTable(
        'deliveries-table',
        ['Endpoint', 'Status', 'Attempts', 'Last HTTP status', 'Last error', 'Actions'],
        tbody,
        'The latest attempt of each endpoint',
      ),
      h('div', { class: 'actions' }, resendButton(tid, eid, undefined, out, progress, watch)),
      progress.el,
      out.el,
    ),
    admin && failed.length > 0
      ? section(
          'recover',
          'Recover since',
          h(
            'p',
            { class: 'note' },
            'Fixed the endpoint? Send again every delivery to it that failed for good since a time, not only this event.',
          ),
          failed.map((p) =>
            recoverForm(tid, p, Date.parse(ev.receivedAt) - 60_000, recoverOut, progress, watch),
          ),
          recoverOut.el,
        )
      : null,
    section('attempts', 'Attempts', attempts.el, attemptsOut.el),
  );
  await attempts.pager.first().catch((err) => attemptsOut.error(err));
}

// --- endpoint page ----------------------------------------------------------------------------------

/** One endpoint (admin): its URL, "recover since" with progress, and its attempts, paged. */
async function renderEndpoint({ tid, epid }, stale) {
  const ep = await readUnlessStale(`/v1/tenants/${enc(tid)}/endpoints/${enc(epid)}`, stale);
  if (!ep) return;
  const { out, attemptsOut, progress } = actionWidgets();
  const url = h('input', {
    id: 'endpoint-url',
    name: 'url',
    type: 'url',
    required: true,
    size: 48,
    value: ep.url,
  });
  const urlForm = actionForm(
    `URL of endpoint ${epid}`,
    out,
    [labelled('URL', url)],
    async () => {
      const r = await api('PATCH', `/v1/tenants/${enc(tid)}/endpoints/${enc(epid)}`, {
        url: url.value.trim(),
      });
      out.ok(`Endpoint ${epid} now delivers to ${r.url}.`);
    },
    'Save URL',
  );
  const status = h(
    'select',
    { id: 'attempts-status', name: 'status' },
    h('option', { value: '' }, 'all'),
    h('option', { value: 'delivered' }, 'delivered'),
    h('option', { value: 'failed' }, 'failed'),
  );
  const attempts = attemptsTable(
    'endpoint-attempts',
    tid,
    attemptsOut,
    (cursor) =>
      api(
        'GET',
        `/v1/tenants/${enc(tid)}/endpoints/${enc(epid)}/attempts?limit=${ATTEMPTS_PAGE}${status.value ? `&status=${status.value}` : ''}${cursor ? `&cursor=${enc(cursor)}` : ''}`,
      ),
    { withEvent: true, withEndpoint: false },
  );
  status.addEventListener('change', () => {
    attemptsOut.clear();
    attempts.pager.first().catch((err) => attemptsOut.error(err));
  });
  // The page re-reads the first page of attempts while a recover it started runs.
  const onTick = () => {
    if (!stale()) attempts.pager.first().catch((err) => attemptsOut.error(err));
  };
  main.replaceChildren(
    h('p', {}, h('a', { href: tenantHref(tid) }, `← Tenant ${tid}`)),
    h(
      'h1',
      {},
      `Endpoint ${epid}`,
      badge(ep.status === 'paused' && ep.disabledReason ? 'disabled' : ep.status),
    ),
    ep.disabledReason ? h('p', { class: 'note' }, ep.disabledReason) : null,
    urlForm,
    out.el,
    section(
      'recover',
      'Recover since',
      h(
        'p',
        { class: 'note' },
        'Sends again every delivery to this endpoint that failed for good since a time: its dead letters, and failures whose entry is gone.',
      ),
      recoverForm(tid, epid, Date.now() - 3_600_000, out, progress, onTick),
      progress.el,
    ),
    section(
      'endpoint-attempts-section',
      'Attempts',
      h('div', { class: 'inline actions' }, h('label', { for: 'attempts-status' }, 'Outcome ', status)),
      attempts.el,
      attemptsOut.el,
    ),
  );
  await attempts.pager.first().catch((err) => attemptsOut.error(err));
}

window.addEventListener('hashchange', () => render());
render();

// Spillway operator console. Hand-written, no framework, no build step: served as is by the admin
// role (see docs/console.md). Views are picked by the URL hash; the token lives in sessionStorage
// and travels only in the Authorization header, never in a URL.

const TOKEN_KEY = 'spillway.console.token';
const DLQ_PAGE = 25;
const CHART_POINTS = 300;

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
  if (parts[0] === 'tenants' && parts[1]) return { view: 'tenant', tid: parts[1] };
  return { view: 'overview' };
}

const enc = encodeURIComponent;
const tenantHref = (tid) => `#/tenants/${enc(tid)}`;
const eventHref = (tid, eid) => `#/tenants/${enc(tid)}/events/${enc(eid)}`;
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

/** The tenants table, updated in place from each snapshot (rows keyed by tenant id). */
function tenantsTable() {
  const tbody = h('tbody');
  const rows = new Map();
  const sparks = new Map();
  const table = h(
    'table',
    { id: 'tenants' },
    h('caption', {}, 'Every tenant, live (one server-sent snapshot a second)'),
    h(
      'thead',
      {},
      h(
        'tr',
        {},
        h('th', { scope: 'col' }, 'Tenant'),
        COLUMNS.map(([k, label]) =>
          h(
            'th',
            { scope: 'col', class: k === 'status' || k === 'breaker' || k === 'trend' ? '' : 'num' },
            label,
          ),
        ),
      ),
    ),
    tbody,
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
            h(
              'td',
              {
                dataset: { field: k },
                class: k === 'status' || k === 'breaker' || k === 'trend' ? '' : 'num',
              },
              k === 'trend' ? spark.svg : null,
            ),
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
  const create = h(
    'form',
    {
      class: 'inline',
      'aria-label': 'Create tenant',
      onsubmit: async (e) => {
        e.preventDefault();
        out.clear();
        const body = { id: newId.value.trim() };
        if (newMax.value) body.limits = { maxInFlight: Number(newMax.value) };
        try {
          const t = await api('POST', '/v1/tenants', body);
          location.hash = tenantHref(t.id);
        } catch (err) {
          out.error(err);
        }
      },
    },
    h('label', { for: 'new-tenant' }, 'New tenant id', newId),
    h('label', { for: 'new-max' }, 'Max in flight', newMax),
    h('button', { type: 'submit' }, 'Create tenant'),
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

const CARDS = [
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
];

function section(id, title, ...children) {
  return h('section', { id, 'aria-labelledby': `${id}-h` }, h('h2', { id: `${id}-h` }, title), ...children);
}

/** A small uPlot chart of delivered/s and failed/s over the last few minutes (client-side history). */
function throughputChart() {
  const box = h('div', { class: 'chart', role: 'img', 'aria-label': 'Delivered and failed per second' });
  const data = [[], [], []];
  let plot = null;
  const push = (snap) => {
    if (snap.deliveredRate === null) return;
    data[0].push(snap.at / 1000);
    data[1].push(snap.deliveredRate);
    data[2].push(snap.failedRate);
    if (data[0].length > CHART_POINTS) for (const d of data) d.shift();
    if (!window.uPlot) return;
    if (!plot) {
      plot = new window.uPlot(
        {
          width: Math.min(740, main.clientWidth - 30),
          height: 180,
          series: [
            {},
            { label: 'delivered/s', stroke: '#116329', width: 2 },
            { label: 'failed/s', stroke: '#a40e26', width: 2 },
          ],
          axes: [{}, { size: 50 }],
          scales: { y: { range: (_u, _min, max) => [0, Math.max(1, max)] } },
        },
        data,
        box,
      );
    } else plot.setData(data);
  };
  return { box, push, destroy: () => plot?.destroy() };
}

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
  state.cleanup.push(chart.destroy);
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
  pauseBtn.addEventListener('click', async () => {
    const action = status === 'paused' ? 'resume' : 'pause';
    const ok = await confirmDialog(
      action === 'pause' ? `Pause tenant ${tid}?` : `Resume tenant ${tid}?`,
      action === 'pause'
        ? 'Events are still accepted and kept durably (spilled to Kafka); nothing is delivered until you resume.'
        : 'Everything kept while paused is delivered, within the tenant’s limits.',
      action === 'pause' ? 'Pause' : 'Resume',
    );
    if (!ok) return;
    try {
      const r = await api('POST', `/v1/tenants/${enc(tid)}/${action}`);
      status = r.status;
      drawPause();
      statusEl.replaceChildren(badge(r.status));
      pauseOut.ok(`Tenant ${r.status === 'paused' ? 'paused' : 'resumed'}.`);
    } catch (err) {
      pauseOut.error(err);
    }
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
    chart.box,
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
  parts.push(section('lookup', 'Find an event', eventLookupForm(tid)));
  main.replaceChildren(...parts);
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
  const table = h(
    'table',
    { id: 'endpoints-table' },
    h(
      'thead',
      {},
      h(
        'tr',
        {},
        ['Endpoint', 'Breaker', 'Delivered', 'Failed', 'Delivered/s'].map((t) =>
          h('th', { scope: 'col' }, t),
        ),
      ),
    ),
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
  return { input, label: h('label', { for: id }, label, input) };
}

function limitsSection(tid, tenant) {
  const l = tenant.limits;
  const max = numInput('limit-max', 'Max in flight (credits)', l.maxInFlight, { required: true });
  const conc = numInput('limit-concurrency', 'Concurrency per worker', l.concurrency, { required: true });
  const rps = numInput('limit-rate', 'Rate per second (empty = unlimited)', l.rate?.perSecond);
  const burst = numInput('limit-burst', 'Burst', l.rate?.burst);
  const out = outcome();
  const form = h(
    'form',
    {
      class: 'inline',
      'aria-label': 'Limits',
      onsubmit: async (e) => {
        e.preventDefault();
        out.clear();
        const limits = { maxInFlight: Number(max.input.value), concurrency: Number(conc.input.value) };
        if (rps.input.value)
          limits.rate = {
            perSecond: Number(rps.input.value),
            burst: Number(burst.input.value || rps.input.value),
          };
        else limits.rate = null;
        try {
          const t = await api('PATCH', `/v1/tenants/${enc(tid)}`, { limits });
          out.ok(
            `Saved: max in flight ${fmt(t.limits.maxInFlight)}, concurrency ${fmt(t.limits.concurrency)}, rate ${
              t.limits.rate
                ? `${fmt(t.limits.rate.perSecond)}/s (burst ${fmt(t.limits.rate.burst)})`
                : 'unlimited'
            }.`,
          );
        } catch (err) {
          out.error(err);
        }
      },
    },
    max.label,
    conc.label,
    rps.label,
    burst.label,
    h('button', { type: 'submit' }, 'Save limits'),
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
    toggle.addEventListener('click', async () => {
      const action = ep.status === 'paused' ? 'resume' : 'pause';
      try {
        const r = await api('POST', `/v1/tenants/${enc(tid)}/endpoints/${enc(ep.id)}/${action}`);
        ep.status = r.status;
        if (r.status === 'active') delete ep.disabledReason;
        tr.replaceWith(row(ep));
        out.ok(`Endpoint ${ep.id} ${r.status === 'active' ? 'resumed' : 'paused'}.`);
      } catch (err) {
        out.error(err);
      }
    });
    const saveUrl = h(
      'button',
      {
        type: 'button',
        class: 'secondary',
        'aria-label': `Save URL of endpoint ${ep.id}`,
        onclick: async () => {
          try {
            const r = await api('PATCH', `/v1/tenants/${enc(tid)}/endpoints/${enc(ep.id)}`, {
              url: urlInput.value.trim(),
            });
            ep.url = r.url;
            out.ok(`Endpoint ${ep.id} now delivers to ${r.url}.`);
          } catch (err) {
            out.error(err);
          }
        },
      },
      'Save URL',
    );
    const tr = h(
      'tr',
      { dataset: { endpoint: ep.id } },
      h('th', { scope: 'row' }, ep.id),
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
  const id = h('input', { id: 'new-ep-id', name: 'id', placeholder: 'generated' });
  const types = h('input', { id: 'new-ep-types', name: 'eventTypes', placeholder: '*' });
  const form = h(
    'form',
    {
      class: 'inline',
      'aria-label': 'Add endpoint',
      onsubmit: async (e) => {
        e.preventDefault();
        out.clear();
        const body = { url: url.value.trim() };
        if (id.value.trim()) body.id = id.value.trim();
        if (types.value.trim())
          body.eventTypes = types.value
            .split(',')
            .map((s) => s.trim())
            .filter(Boolean);
        try {
          const ep = await api('POST', `/v1/tenants/${enc(tid)}/endpoints`, body);
          tbody.append(row(ep));
          out.ok(
            `Endpoint ${ep.id} added. Its signing secret (shown once here): `,
            h('span', { class: 'secret' }, ep.secret),
          );
          form.reset();
        } catch (err) {
          out.error(err);
        }
      },
    },
    h('label', { for: 'new-ep-url' }, 'URL', url),
    h('label', { for: 'new-ep-id' }, 'Id', id),
    h('label', { for: 'new-ep-types' }, 'Event types (comma-separated)', types),
    h('button', { type: 'submit' }, 'Add endpoint'),
  );
  const table = h(
    'table',
    { id: 'endpoints-table' },
    h(
      'thead',
      {},
      h(
        'tr',
        {},
        [
          'Endpoint',
          'URL',
          'Status',
          'Breaker',
          'Rate limit',
          'Delivered',
          'Failed',
          'Delivered/s',
          'Actions',
        ].map((t) => h('th', { scope: 'col' }, t)),
      ),
    ),
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
  const id = h('input', { id: 'new-src-id', name: 'id', placeholder: 'generated' });
  const form = h(
    'form',
    {
      class: 'inline',
      'aria-label': 'Add source',
      onsubmit: async (e) => {
        e.preventDefault();
        out.clear();
        const body = { kind: kind.value, secret: secret.value };
        if (id.value.trim()) body.id = id.value.trim();
        try {
          const s = await api('POST', `/v1/tenants/${enc(tid)}/sources`, body);
          tbody.append(row(s));
          out.ok(`Source ${s.id} added: providers post to ${base}${s.ingestPath}.`);
          form.reset();
        } catch (err) {
          out.error(err);
        }
      },
    },
    h('label', { for: 'new-src-kind' }, 'Kind', kind),
    h('label', { for: 'new-src-id' }, 'Id', id),
    h('label', { for: 'new-src-secret' }, 'Signing secret', secret),
    h('button', { type: 'submit' }, 'Add source'),
  );
  const table = h(
    'table',
    { id: 'sources-table' },
    h(
      'thead',
      {},
      h(
        'tr',
        {},
        ['Source', 'Kind', 'Ingest URL', 'Allowed clients', 'Max body bytes'].map((t) =>
          h('th', { scope: 'col' }, t),
        ),
      ),
    ),
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
            onclick: async () => {
              const ok = await confirmDialog(
                `Revoke key ${k.id}?`,
                'Requests with this key are refused from now on.',
                'Revoke',
              );
              if (!ok) return;
              try {
                await api('DELETE', `/v1/tenants/${enc(tid)}/keys/${enc(k.id)}`);
                tr.remove();
                out.ok(`Key ${k.id} revoked.`);
              } catch (err) {
                out.error(err);
              }
            },
          },
          'Revoke',
        ),
      ),
    );
    return tr;
  };
  for (const k of keys) tbody.append(row(k));
  const name = h('input', { id: 'new-key-name', name: 'name' });
  const form = h(
    'form',
    {
      class: 'inline',
      'aria-label': 'Create API key',
      onsubmit: async (e) => {
        e.preventDefault();
        out.clear();
        try {
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
        } catch (err) {
          out.error(err);
        }
      },
    },
    h('label', { for: 'new-key-name' }, 'Name', name),
    h('button', { type: 'submit' }, 'Create key'),
  );
  const table = h(
    'table',
    { id: 'keys-table' },
    h(
      'thead',
      {},
      h(
        'tr',
        {},
        ['Key', 'Name', 'Created', 'Actions'].map((t) => h('th', { scope: 'col' }, t)),
      ),
    ),
    tbody,
  );
  return section('keys', 'API keys', table, form, out.el);
}

/**
 * The DLQ, paged in the browser. The API returns at most 1,000 entries and has no cursor yet, so
 * the pages cover those; the total comes from the live stats. Replay shows progress from the DLQ
 * length the stream reports while the replay request runs.
 */
function dlqSection(tid, endpoints) {
  const out = outcome();
  let entries = [];
  let page = 0;
  let replay = null; // { start, endpointId }
  let lastDlq = null;
  let loading = null;
  const filter = h(
    'select',
    { id: 'dlq-endpoint', name: 'endpoint' },
    h('option', { value: '' }, 'all endpoints'),
    endpoints.map((e) => h('option', { value: e.id }, e.id)),
  );
  const tbody = h('tbody');
  const info = h('span', { class: 'note', id: 'dlq-info' });
  const prev = h('button', { type: 'button', class: 'secondary' }, 'Previous page');
  const next = h('button', { type: 'button', class: 'secondary' }, 'Next page');
  const progress = h('progress', {
    id: 'dlq-progress',
    max: 1,
    value: 0,
    hidden: true,
    'aria-label': 'Replay progress',
  });
  const progressText = h('span', { id: 'dlq-progress-text', 'aria-live': 'polite' });
  const draw = () => {
    const from = page * DLQ_PAGE;
    const slice = entries.slice(from, from + DLQ_PAGE);
    tbody.replaceChildren(
      ...slice.map((d) =>
        h(
          'tr',
          {},
          h('td', {}, h('a', { href: eventHref(tid, d.eventId) }, d.eventId)),
          h('td', {}, d.endpointId),
          h('td', { class: 'num' }, fmt(d.attempts)),
          h('td', {}, d.lastError),
          h('td', {}, new Date(d.failedAt).toLocaleString()),
        ),
      ),
    );
    if (slice.length === 0)
      tbody.append(h('tr', {}, h('td', { colspan: 5, class: 'note' }, 'The DLQ is empty.')));
    info.textContent =
      entries.length === 0
        ? ''
        : `Entries ${from + 1}–${from + slice.length} of ${entries.length}${entries.length >= 1000 ? ' (the API lists the first 1,000)' : ''}`;
    prev.disabled = page === 0;
    next.disabled = from + DLQ_PAGE >= entries.length;
  };
  const load = async () => {
    const q = filter.value ? `&endpointId=${enc(filter.value)}` : '';
    entries = (await api('GET', `/v1/tenants/${enc(tid)}/dlq?limit=1000${q}`)).data;
    page = Math.min(page, Math.max(0, Math.ceil(entries.length / DLQ_PAGE) - 1));
    draw();
  };
  prev.addEventListener('click', () => {
    page--;
    draw();
  });
  next.addEventListener('click', () => {
    page++;
    draw();
  });
  filter.addEventListener('change', () => {
    page = 0;
    load().catch((err) => out.error(err));
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
  const el = section(
    'dlq',
    'Dead letters',
    h(
      'div',
      { class: 'inline actions' },
      h('label', { for: 'dlq-endpoint' }, 'Endpoint ', filter),
      replayBtn,
      progress,
      progressText,
    ),
    h(
      'table',
      { id: 'dlq-table' },
      h(
        'thead',
        {},
        h(
          'tr',
          {},
          ['Event', 'Endpoint', 'Attempts', 'Last error', 'Failed at'].map((t) =>
            h('th', { scope: 'col' }, t),
          ),
        ),
      ),
      tbody,
    ),
    h('div', { class: 'pager' }, prev, next, info),
    out.el,
  );
  return {
    el,
    load,
    /**
     * Called with each live DLQ length. While a replay runs, progress = how much has left the DLQ;
     * otherwise a changed length re-reads the list (at most one read at a time, so ≤ 1 a second).
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
        replay.start = Math.max(dlq, entries.length);
        progress.max = Math.max(1, replay.start);
      }
      const done = Math.max(0, replay.start - dlq);
      progress.value = done;
      progressText.textContent = `Replaying: ${fmt(done)} of ${fmt(replay.start)}`;
    },
  };
}

// --- event page -----------------------------------------------------------------------------------

async function renderEvent({ tid, eid }, stale) {
  const ev = await api('GET', `/v1/tenants/${enc(tid)}/events/${enc(eid)}`);
  if (stale()) return;
  const admin = isAdmin();
  const out = outcome();
  const tbody = h('tbody');
  const drawRows = (e) => {
    tbody.replaceChildren(
      ...e.deliveries.map((d) =>
        h(
          'tr',
          { dataset: { endpoint: d.endpointId } },
          h(
            'th',
            { scope: 'row' },
            admin ? h('a', { href: `${tenantHref(tid)}` }, d.endpointId) : d.endpointId,
          ),
          h('td', { dataset: { field: 'status' } }, badge(d.status)),
          h('td', { class: 'num', dataset: { field: 'attempts' } }, fmt(d.attempts)),
          h('td', { class: 'num', dataset: { field: 'lastStatus' } }, d.lastStatus ?? '–'),
          h('td', { dataset: { field: 'lastError' } }, d.lastError ?? ''),
          h(
            'td',
            {},
            admin && d.status === 'failed'
              ? h(
                  'button',
                  {
                    type: 'button',
                    class: 'secondary',
                    'aria-label': `Replay DLQ of endpoint ${d.endpointId}`,
                    onclick: async () => {
                      const ok = await confirmDialog(
                        `Replay the DLQ of endpoint ${d.endpointId}?`,
                        'Every dead-lettered event of this endpoint, this one included, is delivered again with a fresh attempt schedule.',
                        'Replay',
                      );
                      if (!ok) return;
                      try {
                        const r = await api('POST', `/v1/tenants/${enc(tid)}/dlq/replay`, {
                          endpointId: d.endpointId,
                        });
                        out.ok(`Replayed ${fmt(r.replayed)} entries of ${d.endpointId}.`);
                        watchUntil = Date.now() + 60_000;
                        refresh();
                      } catch (err) {
                        out.error(err);
                      }
                    },
                  },
                  'Replay DLQ',
                )
              : null,
          ),
        ),
      ),
    );
  };
  const refreshed = h('span', { class: 'live' });
  const isFinal = (e) => e.deliveries.every((d) => d.status === 'delivered' || d.status === 'failed');
  // After an action, keep re-reading for a while even if the event looked final before it.
  let watchUntil = 0;
  let final = isFinal(ev);
  const refresh = async () => {
    try {
      const e = await api('GET', `/v1/tenants/${enc(tid)}/events/${enc(eid)}`);
      if (stale()) return;
      drawRows(e);
      final = isFinal(e);
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
        h('dd', { class: 'value' }, new Date(ev.receivedAt).toLocaleString()),
      ),
    ),
    section(
      'deliveries',
      'Deliveries per endpoint',
      h(
        'table',
        { id: 'deliveries-table' },
        h('caption', {}, 'The last attempt of each endpoint (attempt history is not recorded yet).'),
        h(
          'thead',
          {},
          h(
            'tr',
            {},
            ['Endpoint', 'Status', 'Attempts', 'Last HTTP status', 'Last error', 'Actions'].map((t) =>
              h('th', { scope: 'col' }, t),
            ),
          ),
        ),
        tbody,
      ),
      out.el,
    ),
  );
}

window.addEventListener('hashchange', () => render());
render();

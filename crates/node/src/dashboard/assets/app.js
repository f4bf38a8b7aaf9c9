// The tabos dashboard: one page, no dependencies, served by the node.
//
// Every view is SQL over the OS state (POST /api/sql, scoped by the
// node to what the signed-in credential may read) or a file read
// (/api/fs/*). A view re-reads when the change feed says something it
// shows changed: one EventSource (/api/events) per view follows the
// channels the view names, and also brings the utilisation samples.
// Nothing here runs on a timer. Everything data says is put into the page
// as text (never as HTML).
'use strict';

// ---------------------------------------------------------------- helpers

const $ = (sel) => document.querySelector(sel);

/** An element: h('td', {class: 'num'}, 'text', child, ...). */
function h(tag, attrs, ...children) {
  const svg = ['svg', 'g', 'rect', 'line', 'polyline', 'circle', 'text', 'title'].includes(tag);
  const el = svg ? document.createElementNS('http://www.w3.org/2000/svg', tag)
    : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

async function api(method, path, body) {
  const init = { method, credentials: 'same-origin', headers: {} };
  if (body !== undefined) {
    init.headers['content-type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const r = await fetch(path, init);
  let j;
  try { j = await r.json(); } catch { j = { error: r.statusText }; }
  if (!r.ok) {
    if (r.status === 401 && path !== '/api/session') signedOut(j.error);
    throw new ApiError(r.status, j.error || r.statusText);
  }
  return j;
}

/** Rows of a statement, as objects by column name. */
async function rows(sql, params, realm) {
  const r = await api('POST', '/api/sql', { sql, params: params || [], realm: realm ?? state.realm });
  return r.rows.map((v) => Object.fromEntries(r.columns.map((c, i) => [c, v[i]])));
}

/** A value as text: a blob as its text. */
function show(v) {
  if (v === null || v === undefined) return '';
  if (typeof v === 'object' && 'blob' in v) return v.blob;
  return String(v);
}

function time(us) {
  if (!us) return '';
  const d = new Date(us / 1000);
  return d.toLocaleTimeString([], { hour12: false }) + '.' + String(d.getMilliseconds()).padStart(3, '0');
}

function age(us) {
  if (!us) return '';
  const s = (Date.now() * 1000 - us) / 1e6;
  if (s < 60) return `${s.toFixed(1)} s`;
  if (s < 3600) return `${(s / 60).toFixed(1)} min`;
  return `${(s / 3600).toFixed(1)} h`;
}

function bytes(n) {
  if (n === null || n === undefined) return '';
  if (n < 1024) return `${n} B`;
  if (n < 1 << 20) return `${(n / 1024).toFixed(1)} KiB`;
  if (n < 1 << 30) return `${(n / (1 << 20)).toFixed(1)} MiB`;
  return `${(n / (1 << 30)).toFixed(1)} GiB`;
}

function table(columns, data, onPick, chosen) {
  return h('table', {},
    h('thead', {}, h('tr', {}, columns.map((c) => h('th', { class: c.num ? 'num' : null }, c.title)))),
    h('tbody', {}, data.map((row) => h('tr', {
      class: [onPick ? 'pick' : '', chosen && chosen(row) ? 'chosen' : ''].join(' ').trim() || null,
      onclick: onPick ? () => onPick(row) : null,
      'data-key': columns[0].key ? show(row[columns[0].key]) : null,
    }, columns.map((c) => {
      const v = c.value ? c.value(row) : show(row[c.key]);
      return h('td', { class: [c.num ? 'num' : '', c.cls ? c.cls(row) : '', c.wrap ? 'wrap' : ''].join(' ').trim() || null }, v);
    })))));
}

function card(title, ...children) {
  return h('div', { class: 'card' }, title ? h('h2', {}, title) : null, ...children);
}

function errorBox(e) {
  return h('p', { class: 'error' }, e.message || String(e));
}

/** Replaces `el`'s content. */
function fill(el, ...children) {
  el.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined));
}

// ------------------------------------------------------------------ plots

/** Ticks for [lo, hi]: about `n` round steps (1, 2 or 5 × 10^k). */
function niceTicks(lo, hi, n) {
  const span = Math.max(hi - lo, 1e-9);
  const raw = span / n;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw);
  const ticks = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) ticks.push(+v.toPrecision(12));
  return ticks;
}

/** Time ticks (µs) on round seconds or minutes, about `n` of them. */
function timeTicks(t0, t1, n) {
  const steps = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600].map((s) => s * 1e6);
  const step = steps.find((s) => (t1 - t0) / s <= n) || steps[steps.length - 1];
  const ticks = [];
  for (let t = Math.ceil(t0 / step) * step; t <= t1; t += step) ticks.push(t);
  return ticks;
}

/** `v` in the plot's unit, for a tick or the hover. */
function inUnit(v, unit) {
  if (v === null || v === undefined) return '–';
  if (unit === 'bytes') return bytes(Math.round(v));
  if (unit === 'cores') return `${(+v).toFixed(v < 10 ? 2 : 1)} cores`;
  return `${+(+v).toFixed(2)} ${unit}`;
}

/** A tick label: short (no unit word, binary units for bytes). */
function tickLabel(v, unit) {
  if (unit === 'bytes') return bytes(v).replace('.0 ', ' ');
  return String(+v.toPrecision(6));
}

function hhmmss(us) {
  return new Date(us / 1000).toLocaleTimeString([], { hour12: false });
}

/**
 * A line plot of series [{name, points: [[t_us, v], ...]}] in `unit`
 * ('cores', 'procs', 'bytes', 'failures'): labelled axes, gridlines at
 * round values and times, a legend, and the values at the pointer's time
 * on hover (a vertical rule and one line per series).
 */
function linePlot(series, unit, yLabel, span) {
  const W = 760, H = 280, L = 76, R = 16, T = 14, B = 46;
  const all = series.flatMap((s) => s.points);
  if (all.length === 0) return h('p', { class: 'muted' }, 'Collecting samples (one per heartbeat)…');
  // The time axis: `span` ([from, to] µs) where given, else the data's.
  const t0 = Math.min(...all.map((p) => p[0]), span ? span[0] : Infinity);
  const t1 = Math.max(...all.map((p) => p[0]), span ? span[1] : -Infinity, t0 + 1e6);
  const top = Math.max(unit === 'bytes' ? 1024 : 1, ...all.map((p) => p[1]));
  // Counts step by whole numbers; bytes by powers of two.
  const counts = unit === 'procs' || unit === 'failures';
  const yt = unit === 'bytes' ? byteTicks(top)
    : niceTicks(0, top * 1.05, 4).filter((v) => !counts || Number.isInteger(v));
  const vmax = Math.max(yt[yt.length - 1], top);
  const x = (t) => L + (W - L - R) * (t - t0) / (t1 - t0);
  const y = (v) => T + (H - T - B) * (1 - v / vmax);
  const grid = [];
  for (const v of yt) {
    grid.push(h('line', { class: 'grid', x1: L, y1: y(v), x2: W - R, y2: y(v) }),
      h('text', { class: 'tick y-tick', x: L - 6, y: y(v) + 4, 'text-anchor': 'end' }, tickLabel(v, unit)));
  }
  for (const t of timeTicks(t0, t1, 6)) {
    // A label near an edge is anchored at that edge, to stay inside.
    const anchor = x(t) > W - R - 32 ? 'end' : x(t) < L + 32 ? 'start' : 'middle';
    grid.push(h('line', { class: 'grid', x1: x(t), y1: T, x2: x(t), y2: H - B }),
      h('text', { class: 'tick x-tick', x: x(t), y: H - B + 16, 'text-anchor': anchor }, hhmmss(t)));
  }
  const rule = h('line', { class: 'hover-rule', x1: 0, y1: T, x2: 0, y2: H - B, visibility: 'hidden' });
  const tip = h('g', { class: 'hover-tip', visibility: 'hidden' });
  const overlay = h('rect', { class: 'hover-area', x: L, y: T, width: W - L - R, height: H - T - B });
  const svg = h('svg', { viewBox: `0 0 ${W} ${H}`, class: 'plot', role: 'img', 'data-unit': unit },
    grid,
    h('line', { class: 'axis', x1: L, y1: H - B, x2: W - R, y2: H - B }),
    h('line', { class: 'axis', x1: L, y1: T, x2: L, y2: H - B }),
    h('text', { class: 'axis-label y-label', x: 14, y: T + (H - T - B) / 2, 'text-anchor': 'middle',
      transform: `rotate(-90 14 ${T + (H - T - B) / 2})` }, yLabel || unit),
    h('text', { class: 'axis-label x-label', x: L + (W - L - R) / 2, y: H - 6, 'text-anchor': 'middle' }, 'time (local)'),
    series.map((s, i) => h('polyline', {
      class: `c${i % 8}`,
      points: s.points.map((p) => `${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(' '),
    }, h('title', {}, s.name))),
    // Sparse series (a point a minute, one sample so far) get a dot per
    // point: a line through one point draws nothing.
    series.map((s, i) => (s.points.length > 60 ? [] : s.points.map((p) => h('circle', {
      class: `dot c${i % 8}`, cx: x(p[0]).toFixed(1), cy: y(p[1]).toFixed(1), r: 3,
    })))),
    rule, tip, overlay);
  // Hover: the samples nearest the pointer's time, one line per series.
  const at = (ev) => {
    const box = svg.getBoundingClientRect();
    const px = (ev.clientX - box.left) * W / box.width;
    return t0 + (Math.min(Math.max(px, L), W - R) - L) / (W - L - R) * (t1 - t0);
  };
  const showAt = (t) => {
    const lines = [h('text', { class: 'tip-time', x: 8, y: 16 }, hhmmss(t))];
    series.forEach((s, i) => {
      if (s.points.length === 0) return;
      const p = s.points.reduce((a, b) => (Math.abs(b[0] - t) < Math.abs(a[0] - t) ? b : a));
      lines.push(h('text', { class: `tip-value t${i % 8}`, x: 8, y: 32 + 15 * lines.length - 15 }, `${s.name}: ${inUnit(p[1], unit)}`));
    });
    const w = 220, hh = 12 + 15 * lines.length;
    const left = x(t) + w + 12 > W ? x(t) - w - 8 : x(t) + 8;
    fill(tip, h('rect', { class: 'tip-box', width: w, height: hh, rx: 4 }), lines);
    tip.setAttribute('transform', `translate(${left.toFixed(1)} ${T + 4})`);
    for (const el of [rule]) { el.setAttribute('x1', x(t)); el.setAttribute('x2', x(t)); }
    rule.setAttribute('visibility', 'visible');
    tip.setAttribute('visibility', 'visible');
  };
  overlay.addEventListener('mousemove', (ev) => showAt(at(ev)));
  overlay.addEventListener('mouseleave', () => {
    rule.setAttribute('visibility', 'hidden');
    tip.setAttribute('visibility', 'hidden');
  });
  const legend = h('div', { class: 'legend' },
    series.map((s, i) => h('span', {}, h('i', { class: `c${i % 8}` }), `${s.name}`)));
  return h('div', { class: 'plot-box' }, svg, legend);
}

/** Round byte ticks: 0 and multiples of a power of two (KiB to TiB). */
function byteTicks(top) {
  let unit = 1024;
  while (unit * 1024 <= top) unit *= 1024;
  const ticks = niceTicks(0, (top * 1.05) / unit, 4);
  return ticks.map((t) => t * unit);
}

/** Ray's task timeline: per proc, waiting (spawn → start) and running (start → exit). */
function timeline(procs) {
  const list = procs.slice(0, 60).reverse();
  if (list.length === 0) return h('p', { class: 'muted' }, 'No procs.');
  const now = Date.now() * 1000;
  const t0 = Math.min(...list.map((p) => p.spawn_us));
  const t1 = Math.max(now, ...list.map((p) => p.exit_us || 0));
  const W = 900, L = 150, R = 10, ROW = 14, T = 6;
  const H = T + list.length * ROW + 20;
  const x = (t) => L + (W - L - R) * (t - t0) / Math.max(1, t1 - t0);
  return h('svg', { viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: 'img', id: 'timeline' },
    list.map((p, i) => {
      const yy = T + i * ROW;
      const start = p.start_us || p.exit_us || now;
      const end = p.exit_us || now;
      const bars = [h('rect', { class: 'tl-wait', x: x(p.spawn_us), y: yy, width: Math.max(1, x(start) - x(p.spawn_us)), height: ROW - 3 },
        h('title', {}, `${p.pid} waiting ${((start - p.spawn_us) / 1000).toFixed(1)} ms`))];
      if (p.start_us) {
        bars.push(h('rect', { class: nonzero(p) ? 'tl-failed' : `tl-${p.state}`, x: x(p.start_us), y: yy, width: Math.max(1, x(end) - x(p.start_us)), height: ROW - 3 },
          h('title', {}, `${p.pid} ${p.state} ${((end - p.start_us) / 1000).toFixed(1)} ms`)));
      }
      return h('g', {}, h('text', { x: 0, y: yy + ROW - 4 }, `${p.pid} ${p.program.split('/').pop()}`.slice(0, 24)), bars);
    }),
    h('text', { x: L, y: H - 4 }, time(t0)),
    h('text', { x: W - R - 80, y: H - 4 }, time(t1)));
}

// ------------------------------------------------------------------ state

const state = {
  me: null,
  realm: '',
  events: null,
  refresh: null,
  onSample: null,
  pending: null,
  samples: [],
  view: {},
};

/** Runs the view's refresh once, soon: a burst of changes is one re-read. */
function schedule() {
  if (state.pending) return;
  state.pending = setTimeout(async () => {
    state.pending = null;
    if (state.refresh) {
      try { await state.refresh(); } catch (e) { if (!(e instanceof ApiError && e.status === 401)) console.error(e); }
    }
  }, 120);
}

/** Follows `channels` of the current realm (and the utilisation samples). */
function follow(channels) {
  if (state.events) state.events.close();
  const q = new URLSearchParams();
  if (channels.length) q.set('realm', state.realm);
  for (const c of channels) q.append('ch', c);
  const es = new EventSource(`/api/events?${q}`);
  state.events = es;
  es.addEventListener('open', () => { $('#live').className = 'live on'; schedule(); });
  es.addEventListener('change', () => schedule());
  es.addEventListener('sample', (ev) => {
    const s = JSON.parse(ev.data);
    state.samples.push(s);
    if (state.samples.length > 900) state.samples.shift();
    if (state.onSample) state.onSample(s);
  });
  es.addEventListener('error', async () => {
    $('#live').className = 'live off';
    // Reconnects by itself; find out whether the session ended meanwhile.
    try { await api('GET', '/api/session'); } catch { /* signedOut has run */ }
  });
}

// ------------------------------------------------------------------ views

const views = {};

views.overview = async (page) => {
  const op = state.me.operator;
  const nodesBox = h('div'), realmsBox = h('div'), failBox = h('div', { id: 'failures' });
  const plots = h('div', { class: 'row', id: 'plots' });
  fill(page, card('Failures', failBox), op ? card('Nodes', nodesBox) : null, card('Realms', realmsBox), plots);
  const history = await api('GET', '/api/history');
  state.samples = history.samples;
  const draw = () => {
    // name → points, for each plotted figure.
    const figs = {};
    const add = (fig, name, t, v) => {
      if (v === null || v === undefined) return;
      const m = figs[fig] || (figs[fig] = new Map());
      if (!m.has(name)) m.set(name, []);
      m.get(name).push([t, Number(v)]);
    };
    // Failures per minute: each sample's count into its minute.
    const perMinute = new Map();
    for (const s of state.samples) {
      for (const n of s.nodes) {
        add('cpu', n.node_id, s.at_us, n.busy_cores);
        add('nodeMem', n.node_id, s.at_us, n.mem_used_bytes);
        add('nodeDisk', n.node_id, s.at_us, n.disk_used_bytes);
      }
      for (const r of s.realms) {
        add('realmCores', r.realm, s.at_us, r.cores);
        add('realmProcs', r.realm, s.at_us, r.running + r.waiting);
        add('realmMem', r.realm, s.at_us, r.mem_bytes);
        add('realmStored', r.realm, s.at_us, r.stored_bytes);
        const minute = Math.floor(s.at_us / 60e6) * 60e6;
        const m = perMinute.get(r.realm) || new Map();
        m.set(minute, (m.get(minute) || 0) + (r.failed || 0));
        perMinute.set(r.realm, m);
      }
    }
    for (const [realm, m] of perMinute) {
      for (const [minute, n] of [...m].sort((p, q) => p[0] - q[0])) add('failures', realm, minute, n);
    }
    const series = (fig) => [...(figs[fig] || new Map())].map(([name, points]) => ({ name, points }));
    // Every plot spans the samples' time, the failures' minutes too.
    const span = state.samples.length
      ? [state.samples[0].at_us, state.samples[state.samples.length - 1].at_us] : null;
    // `none`: what an empty plot means once samples have come (e.g. no
    // node has a block store), rather than "collecting samples".
    const plot = (id, title, fig, unit, label, none) =>
      h('div', { class: 'card', id: `plot-${id}` }, h('h2', {}, title),
        none && span && series(fig).length === 0 ? h('p', { class: 'muted none' }, none)
          : linePlot(series(fig), unit, label, span));
    fill(plots,
      plot('failures', 'Failures per minute (procs failed or exited ≠ 0), by realm', 'failures', 'failures', 'failures / min'),
      op ? plot('cpu', 'Node CPU (busy cores, measured)', 'cpu', 'cores', 'busy cores') : null,
      op ? plot('node-memory', 'Node memory in use (node and its procs)', 'nodeMem', 'bytes', 'memory') : null,
      op ? plot('node-disk', 'Node block store in use', 'nodeDisk', 'bytes', 'block store',
        'No node keeps a block store: every file\'s data is in the database\'s tables.') : null,
      plot('realm-cores', 'Realm cores held by running procs', 'realmCores', 'cores', 'cores'),
      plot('realm-procs', 'Realm live procs (running and waiting)', 'realmProcs', 'procs', 'procs'),
      plot('realm-memory', 'Realm memory used by running procs (measured)', 'realmMem', 'bytes', 'memory'),
      plot('realm-storage', 'Realm storage (files, names, kv, mail, code, tables)', 'realmStored', 'bytes', 'stored'));
  };
  state.onSample = draw;
  draw();
  state.refresh = async () => {
    // What is failing, and why: the last hour's failures, newest first.
    const hour = (Date.now() - 3600e3) * 1000;
    const failing = `(state = 'failed' OR (state = 'exited' AND exit_status <> 0))`;
    const [count] = await rows(`SELECT count(*) AS n FROM proc WHERE exit_us >= $1 AND ${failing}`, [hour], op ? '*' : '');
    const recent = await rows(`SELECT realm, pid, program, state, exit_status, error, exit_us FROM proc
      WHERE exit_us >= $1 AND ${failing} ORDER BY exit_us DESC LIMIT 10`, [hour], op ? '*' : '');
    const n = Number(count.n);
    fill(failBox,
      h('p', { class: n ? 'fail-count bad' : 'fail-count ok', id: 'fail-count' },
        h('strong', {}, String(n)), n === 1 ? ' proc failed in the last hour' : ' procs failed in the last hour'),
      n ? table([
        { title: 'pid', key: 'pid' }, { title: 'realm', key: 'realm' },
        { title: 'program', key: 'program' },
        { title: 'state', value: (p) => (p.state === 'failed' ? 'failed' : 'exited'), cls: () => 'state-failed' },
        { title: 'exit', value: (p) => show(p.exit_status), num: true, cls: () => 'state-failed' },
        { title: 'why', value: (p) => p.error || (p.exit_status !== null ? `exit status ${p.exit_status}` : ''), wrap: true },
        { title: 'ended', value: (p) => `${age(p.exit_us)} ago` },
      ], recent, (p) => { setRealm(p.realm); state.view.pid = p.pid; location.hash = '#procs'; }) : null);
    if (op) {
      const nodes = await rows(`SELECT node_id, address, cores, mem_mb, state, busy_cores,
        mem_used_bytes, disk_used_bytes, heartbeat_us, draining_us, elastic FROM node ORDER BY node_id`, [], '*');
      fill(nodesBox, table([
        { title: 'node', key: 'node_id' }, { title: 'address', key: 'address' },
        { title: 'state', value: (n) => n.state === 'up' && n.draining_us ? 'draining' : n.state },
        { title: 'cores', key: 'cores', num: true },
        { title: 'busy', value: (n) => Number(n.busy_cores).toFixed(2), num: true },
        { title: 'memory', value: (n) => `${n.mem_mb} MiB`, num: true },
        { title: 'memory in use', value: (n) => bytes(n.mem_used_bytes), num: true },
        { title: 'block store in use', value: (n) => bytes(n.disk_used_bytes), num: true },
        { title: 'heartbeat', value: (n) => age(n.heartbeat_us) + ' ago' },
        { title: 'elastic', value: (n) => (n.elastic ? 'yes' : '') },
      ], nodes));
    }
    const realms = await rows(`SELECT realm, live_procs, quota_procs, cores, quota_cores, mem_mb,
      stored_bytes, mailbox_bytes, procedures FROM realm_usage ORDER BY realm`, [], op ? '*' : '');
    fill(realmsBox, table([
      { title: 'realm', key: 'realm' },
      { title: 'live procs', value: (r) => r.live_procs + (r.quota_procs ? ` / ${r.quota_procs}` : ''), num: true },
      { title: 'cores', value: (r) => r.cores + (r.quota_cores ? ` / ${r.quota_cores}` : ''), num: true },
      { title: 'memory', value: (r) => `${r.mem_mb} MiB`, num: true },
      { title: 'stored', value: (r) => bytes(r.stored_bytes), num: true },
      { title: 'in mailboxes', value: (r) => bytes(r.mailbox_bytes), num: true },
      { title: 'procedures', key: 'procedures', num: true },
    ], realms, op ? (r) => { setRealm(r.realm); location.hash = '#procs'; } : null));
  };
  follow(['procs']);
};

const PROC_STATES = ['spawned', 'claimed', 'running', 'exited', 'evicted', 'failed'];
// A proc that exited with a status other than 0.
const nonzero = (p) => p.state === 'exited' && p.exit_status !== null && p.exit_status !== undefined && Number(p.exit_status) !== 0;

views.procs = async (page) => {
  const f = state.view.procFilter || (state.view.procFilter = { state: '', kind: '', program: '', since: '' });
  const listBox = h('div', { id: 'procs' }), tlBox = h('div'), detail = h('div');
  const input = (key, el) => { el.value = f[key]; el.addEventListener('change', () => { f[key] = el.value; schedule(); }); return el; };
  fill(page,
    card('Procs',
      h('div', { class: 'filters' },
        h('label', {}, 'state ', input('state', h('select', {}, h('option', { value: '' }, 'any'),
          h('option', { value: 'live' }, 'live'), PROC_STATES.map((s) => h('option', { value: s }, s))))),
        h('label', {}, 'kind ', input('kind', h('select', {}, ['', 'native', 'wasm', 'js'].map((k) => h('option', { value: k }, k || 'any'))))),
        h('label', {}, 'program ', input('program', h('input', { placeholder: 'contains', size: 14 }))),
        h('label', {}, 'spawned in the last ', input('since', h('input', { placeholder: 'minutes', size: 6 })), ' min')),
      listBox),
    card('Timeline (spawn → start → exit; grey: waiting)', tlBox),
    detail);
  // A proc's detail: its events and its output (the last lines of stdout
  // and stderr, as `tabos logs` reads them), re-read when its log grows.
  const showDetail = async (pid) => {
    if (state.view.pid !== pid) {
      state.view.pid = pid;
      follow(['procs', `logs/${pid}`]);
    }
    const [ev, out, err, p] = await Promise.all([
      rows(`SELECT at_us, event, detail FROM proc_event
        WHERE realm = $1 AND pid = $2 ORDER BY seq LIMIT 500`, [state.realm, pid]),
      api('POST', '/api/logs', { pid, realm: state.realm, stream: 'stdout' }),
      api('POST', '/api/logs', { pid, realm: state.realm, stream: 'stderr' }),
      rows('SELECT state, exit_status, error FROM proc WHERE realm = $1 AND pid = $2', [state.realm, pid]),
    ]);
    const end = p[0] ? (p[0].error || (p[0].exit_status !== null && p[0].exit_status !== undefined ? `exit status ${p[0].exit_status}` : p[0].state)) : '';
    const output = (name, o) => card(`${name}${o.truncated ? ' (its last lines)' : ''}`,
      h('pre', { class: `log log-${name}` }, o.text || '(nothing yet)'));
    fill(detail,
      card(`Proc ${pid}: ${end}`, table([
        { title: 'at', value: (e) => time(e.at_us) }, { title: 'event', key: 'event' },
        { title: 'detail', key: 'detail', wrap: true }], ev)),
      output('stdout', out), output('stderr', err));
  };
  state.refresh = async () => {
    const where = ['realm = $1'], params = [state.realm];
    const add = (cond, v) => { params.push(v); where.push(cond.replace('?', `$${params.length}`)); };
    if (f.state === 'live') where.push("state IN ('spawned', 'claimed', 'running')");
    else if (f.state) add('state = ?', f.state);
    if (f.kind) add('kind = ?', f.kind);
    if (f.program) add('program LIKE ?', `%${f.program}%`);
    const mins = Number(f.since);
    if (f.since && mins > 0) add('spawn_us >= ?', Math.floor(Date.now() * 1000 - mins * 60e6));
    const procs = await rows(`SELECT pid, state, kind, class, program, cores, worker_id, parent_pid,
      spawn_us, start_us, exit_us, exit_status, error FROM proc WHERE ${where.join(' AND ')}
      ORDER BY spawn_us DESC LIMIT 500`, params);
    fill(listBox, procs.length ? table([
      { title: 'pid', key: 'pid' },
      // An exit with a non-zero status is a failure to whoever reads the
      // page, whatever the kernel's state name: shown so, with its status.
      { title: 'state', value: (p) => (nonzero(p) ? `exited ${p.exit_status}` : p.state), cls: (p) => (nonzero(p) ? 'state-failed' : `state-${p.state}`) },
      { title: 'kind', value: (p) => `${p.kind} ${p.class}` },
      { title: 'program', key: 'program' },
      { title: 'cores', key: 'cores', num: true },
      { title: 'worker', key: 'worker_id' },
      { title: 'spawned', value: (p) => time(p.spawn_us) },
      { title: 'age', value: (p) => age(p.spawn_us) },
      { title: 'ran', value: (p) => (p.start_us ? `${(((p.exit_us || Date.now() * 1000) - p.start_us) / 1e6).toFixed(2)} s` : ''), num: true },
      { title: 'exit', key: 'exit_status', num: true },
      { title: 'reason', value: (p) => p.error || (nonzero(p) ? `exit status ${p.exit_status}` : ''), wrap: true },
    ], procs, (p) => showDetail(p.pid), (p) => p.pid === state.view.pid) : h('p', { class: 'muted' }, 'No procs match.'));
    fill(tlBox, timeline(procs));
    if (state.view.pid) await showDetail(state.view.pid);
  };
  follow(state.view.pid ? ['procs', `logs/${state.view.pid}`] : ['procs']);
};

views.mr = async (page) => {
  const list = h('div'), job = h('div');
  fill(page, card('MapReduce jobs', list), job);
  state.refresh = async () => {
    const names = await rows(`SELECT path, data FROM name_entry WHERE realm = $1 AND path LIKE '/mr/%'
      AND (path LIKE '/mr/%/status' OR path LIKE '/mr/%/job' OR path LIKE '/mr/%/task/%')
      ORDER BY path LIMIT 10000`, [state.realm]);
    const jobs = new Map();
    const get = (id) => jobs.get(id) || jobs.set(id, { id, status: '', maps: 0, reducers: 0, kind: '', tasks: [] }).get(id);
    for (const n of names) {
      const p = n.path.split('/');
      const text = show(n.data);
      if (p.length === 4 && p[3] === 'status') get(p[2]).status = text;
      else if (p.length === 4 && p[3] === 'job') {
        try { const s = JSON.parse(text); Object.assign(get(p[2]), { maps: s.maps, reducers: s.reducers, kind: s.kind }); } catch { /* not a spec */ }
      } else if (p.length === 5 && p[3] === 'task') {
        const [attempt, pid, st] = text.split(' ');
        get(p[2]).tasks.push({ task: p[4], attempt: Number(attempt), pid, state: st });
      }
    }
    const all = [...jobs.values()].filter((j) => j.kind);
    // Each job's latest coordinator proc: a job still "running" whose
    // coordinator has ended is run by nobody — shown failed, with why.
    const coords = all.length ? await rows(`SELECT pid, state, exit_status, error FROM proc
      WHERE realm = $1 AND pid LIKE '%-coord-%' ORDER BY spawn_us LIMIT 10000`, [state.realm]) : [];
    const lastCoord = new Map();
    for (const c of coords) lastCoord.set(c.pid.slice(0, c.pid.lastIndexOf('-coord-')), c);
    for (const j of all) {
      j.mapsDone = j.tasks.filter((t) => t.task.startsWith('m') && t.state === 'done').length;
      j.reducesDone = j.tasks.filter((t) => t.task.startsWith('r') && t.state === 'done').length;
      j.phase = j.status.startsWith('failed') ? 'failed' : j.status.startsWith('done') ? 'done'
        : j.mapsDone < j.maps ? 'map' : 'reduce';
      const c = lastCoord.get(j.id);
      if ((j.phase === 'map' || j.phase === 'reduce') && c && ['exited', 'evicted', 'failed'].includes(c.state)) {
        j.phase = 'failed';
        const how = c.error || (c.exit_status !== null && c.exit_status !== undefined ? `exit status ${c.exit_status}` : c.state);
        j.status = `failed: its coordinator ${c.pid} ended (${how}) and nothing runs the job`;
      }
    }
    fill(list, all.length ? table([
      { title: 'job', key: 'id' }, { title: 'kind', key: 'kind' },
      { title: 'phase', key: 'phase', cls: (j) => (j.phase === 'failed' ? 'state-failed' : '') },
      { title: 'maps', value: (j) => `${j.mapsDone} / ${j.maps}`, num: true },
      { title: 'reduces', value: (j) => `${j.reducesDone} / ${j.reducers}`, num: true },
      { title: 'status', key: 'status', wrap: true },
    ], all, (j) => { state.view.job = j.id; schedule(); follow(mrChannels()); }, (j) => j.id === state.view.job)
      : h('p', { class: 'muted' }, 'No jobs in this realm (tabos mr wordcount … starts one).'));
    // None chosen: the first running job, else the first.
    if (!all.some((x) => x.id === state.view.job) && all.length) {
      state.view.job = (all.find((x) => x.phase === 'map' || x.phase === 'reduce') || all[0]).id;
      follow(mrChannels());
    }
    const j = all.find((x) => x.id === state.view.job);
    if (!j) { fill(job); return; }
    const pct = (d, t) => (t ? Math.round(100 * d / t) : 0);
    // Its tasks' procs are named after it: the job's own timeline.
    const taskProcs = await rows(`SELECT pid, state, program, spawn_us, start_us, exit_us FROM proc
      WHERE realm = $1 AND pid LIKE $2 ORDER BY spawn_us DESC LIMIT 200`, [state.realm, `${j.id}-%`]);
    fill(job, card(`Job ${j.id}`,
      h('p', {}, `phase: ${j.phase} — ${j.status}`),
      h('p', {}, 'map ', progress(pct(j.mapsDone, j.maps), j.phase === 'failed' ? 'failed' : j.mapsDone === j.maps ? 'done' : ''), ` ${j.mapsDone} of ${j.maps}`),
      h('p', {}, 'reduce ', progress(pct(j.reducesDone, j.reducers), j.phase === 'failed' ? 'failed' : j.reducesDone === j.reducers ? 'done' : ''), ` ${j.reducesDone} of ${j.reducers}`),
      table([{ title: 'task', key: 'task' }, { title: 'attempt', key: 'attempt', num: true },
        { title: 'pid', key: 'pid' }, { title: 'state', key: 'state' }], j.tasks),
      h('h2', {}, 'Task timeline (spawn → start → exit)'), timeline(taskProcs)));
  };
  follow(mrChannels());
};

/** A progress bar of `pct` percent, drawn in SVG (no inline styles). */
function progress(pct, cls) {
  return h('svg', { width: 240, height: 12, viewBox: '0 0 240 12' },
    h('rect', { x: 0, y: 0, width: 240, height: 12, rx: 6, class: 'tl-wait' }),
    h('rect', { x: 0, y: 0, width: 2.4 * pct, height: 12, rx: 6, class: cls === 'failed' ? 'tl-failed' : cls === 'done' ? 'tl-exited' : 'tl-running' }));
}

function mrChannels() {
  const ch = ['procs', 'names/mr'];
  if (state.view.job) ch.push(`names/mr/${state.view.job}`, `names/mr/${state.view.job}/task`);
  return ch;
}

const WF_STATES = ['enqueued', 'pending', 'success', 'error', 'cancelled'];

views.workflows = async (page) => {
  const f = state.view.wfFilter || (state.view.wfFilter = { status: '', name: '' });
  const listBox = h('div', { id: 'workflows' }), queuesBox = h('div'), detail = h('div');
  const input = (key, el) => { el.value = f[key]; el.addEventListener('change', () => { f[key] = el.value; schedule(); }); return el; };
  fill(page,
    card('Workflows',
      h('div', { class: 'filters' },
        h('label', {}, 'status ', input('status', h('select', {}, h('option', { value: '' }, 'any'), WF_STATES.map((s) => h('option', { value: s }, s))))),
        h('label', {}, 'function ', input('name', h('input', { placeholder: 'name', size: 14 })))),
      listBox),
    card('Queues', queuesBox),
    detail);
  const wfState = (w) => ({ success: 'exited', error: 'failed', cancelled: 'evicted', pending: 'running', enqueued: 'spawned' }[w.status] || '');
  state.refresh = async () => {
    const where = ['realm = $1'], params = [state.realm];
    if (f.status) { params.push(f.status); where.push(`status = $${params.length}`); }
    if (f.name) { params.push(f.name); where.push(`name = $${params.length}`); }
    const wfs = await rows(`SELECT workflow_id, name, app_version, status, queue, executor, node_id, attempts,
      created_us, started_us, ended_us, error FROM workflow WHERE ${where.join(' AND ')}
      ORDER BY created_us DESC LIMIT 500`, params);
    fill(listBox, wfs.length ? table([
      { title: 'workflow', key: 'workflow_id' },
      { title: 'function', key: 'name' }, { title: 'version', key: 'app_version' },
      { title: 'status', key: 'status', cls: (w) => `state-${wfState(w)}` },
      { title: 'queue', key: 'queue' }, { title: 'executor', key: 'executor' },
      { title: 'attempts', key: 'attempts', num: true },
      { title: 'created', value: (w) => time(w.created_us) },
      { title: 'ran', value: (w) => (w.started_us ? `${(((w.ended_us || Date.now() * 1000) - w.started_us) / 1e6).toFixed(2)} s` : ''), num: true },
      { title: 'error', key: 'error', wrap: true },
    ], wfs, (w) => { state.view.wf = w.workflow_id; follow(wfChannels()); }, (w) => w.workflow_id === state.view.wf)
      : h('p', { class: 'muted' }, 'No workflows (tabos_client::workflows or the Python SDK run them).'));
    const queues = await rows(`SELECT q.queue, q.concurrency, q.node_concurrency, q.rate_limit, q.rate_period_ms,
      (SELECT count(*) FROM workflow w WHERE w.realm = q.realm AND w.queue = q.queue AND w.status = 'enqueued') AS enqueued,
      (SELECT count(*) FROM workflow w WHERE w.realm = q.realm AND w.queue = q.queue AND w.status = 'pending') AS pending
      FROM workflow_queue q WHERE q.realm = $1 ORDER BY q.queue`, [state.realm]);
    fill(queuesBox, queues.length ? table([
      { title: 'queue', key: 'queue' }, { title: 'concurrency', key: 'concurrency', num: true },
      { title: 'per node', key: 'node_concurrency', num: true },
      { title: 'rate', value: (q) => (q.rate_limit ? `${q.rate_limit} / ${q.rate_period_ms} ms` : '') },
      { title: 'enqueued', key: 'enqueued', num: true }, { title: 'pending', key: 'pending', num: true },
    ], queues) : h('p', { class: 'muted' }, 'No queues.'));
    if (!state.view.wf) { fill(detail); return; }
    const steps = await rows(`SELECT step, name, kind, status, attempts, started_us, ended_us, error, output
      FROM workflow_step WHERE realm = $1 AND workflow_id = $2 ORDER BY step LIMIT 2000`, [state.realm, state.view.wf]);
    const asProcs = steps.slice().reverse().map((s) => ({
      pid: `${s.step} ${s.name}`, program: s.kind, state: s.status === 'success' ? 'exited' : s.status === 'error' ? 'failed' : 'running',
      spawn_us: s.started_us, start_us: s.started_us, exit_us: s.ended_us,
    }));
    fill(detail, card(`Workflow ${state.view.wf}: steps`,
      steps.length ? table([
        { title: 'step', key: 'step', num: true }, { title: 'name', key: 'name' }, { title: 'kind', key: 'kind' },
        { title: 'status', key: 'status' }, { title: 'attempts', key: 'attempts', num: true },
        { title: 'took', value: (s) => (s.ended_us ? `${((s.ended_us - s.started_us) / 1000).toFixed(1)} ms` : ''), num: true },
        { title: 'output or error', value: (s) => (s.error || show(s.output)).slice(0, 120), wrap: true },
      ], steps) : h('p', { class: 'muted' }, 'No step recorded yet.'),
      h('h2', {}, 'Step timeline'), timeline(asProcs)));
  };
  follow(wfChannels());
};

function wfChannels() {
  return state.view.wf ? ['workflows', `workflow/${state.view.wf}`] : ['workflows'];
}

const GRAPH_STATES = ['running', 'success', 'error', 'cancelled'];
/** A task's status as the proc states' colours have it. */
const taskState = (t) => ({ success: 'exited', error: 'failed', cancelled: 'evicted', running: 'running', ready: 'claimed', waiting: 'spawned' }[t.status] || '');
/** Most tasks a graph's drawing shows (a larger graph: its table only). */
const GRAPH_DRAWN_MAX = 400;

/** A task graph drawn in layers: a task one layer right of the
 * furthest task it takes; edges from each task to those taking it. */
function dag(tasks, edges) {
  if (tasks.length === 0) return h('p', { class: 'muted' }, 'No tasks.');
  if (tasks.length > GRAPH_DRAWN_MAX) return h('p', { class: 'muted' }, `${tasks.length} tasks: too many to draw (at most ${GRAPH_DRAWN_MAX}); the table below has them.`);
  const byId = new Map(tasks.map((t) => [t.task, t]));
  const takes = new Map(tasks.map((t) => [t.task, []]));
  for (const e of edges) if (takes.has(e.dst) && byId.has(e.src)) takes.get(e.dst).push(e.src);
  const layer = new Map();
  for (const t of tasks) { // submission order: what a task takes came before it
    layer.set(t.task, Math.max(0, ...takes.get(t.task).map((s) => (layer.get(s) ?? 0) + 1)));
  }
  const cols = [];
  for (const t of tasks) (cols[layer.get(t.task)] ||= []).push(t.task);
  const BW = 110, BH = 22, GX = 50, GY = 8;
  const rowsMax = Math.max(...cols.map((c) => c.length));
  const W = cols.length * (BW + GX), H = rowsMax * (BH + GY) + GY;
  const pos = new Map();
  cols.forEach((c, i) => c.forEach((id, j) => pos.set(id, [i * (BW + GX) + 4, GY + j * (BH + GY) + (rowsMax - c.length) * (BH + GY) / 2])));
  const lines = [];
  for (const [dst, srcs] of takes) for (const src of srcs) {
    const [x1, y1] = pos.get(src), [x2, y2] = pos.get(dst);
    lines.push(h('line', { class: 'dag-edge', x1: x1 + BW, y1: y1 + BH / 2, x2, y2: y2 + BH / 2 }));
  }
  const boxes = tasks.map((t) => {
    const [x, y] = pos.get(t.task);
    return h('g', {}, h('rect', { class: `tl-${taskState(t)}`, x, y, width: BW, height: BH, rx: 4 },
      h('title', {}, `${t.task}: ${t.kind} ${t.target} — ${t.status}${t.error ? ': ' + t.error : ''}`)),
      h('text', { class: 'dag-label', x: x + 6, y: y + 15 }, `${t.task} ${t.target}`.slice(0, 18)));
  });
  return h('svg', { viewBox: `0 0 ${W} ${H}`, width: Math.min(W, 1200), role: 'img', id: 'dag' }, lines, boxes);
}

views.graphs = async (page) => {
  const f = state.view.graphFilter || (state.view.graphFilter = { status: '' });
  const listBox = h('div', { id: 'graphs' }), detail = h('div');
  const sel = h('select', {}, h('option', { value: '' }, 'any'), GRAPH_STATES.map((s) => h('option', { value: s }, s)));
  sel.value = f.status;
  sel.addEventListener('change', () => { f.status = sel.value; schedule(); });
  fill(page, card('Task graphs', h('div', { class: 'filters' }, h('label', {}, 'status ', sel)), listBox), detail);
  const gState = (g) => ({ success: 'exited', error: 'failed', cancelled: 'evicted', running: 'running' }[g.status] || '');
  state.refresh = async () => {
    const where = ['realm = $1'], params = [state.realm];
    if (f.status) { params.push(f.status); where.push(`status = $${params.length}`); }
    const gs = await rows(`SELECT graph_id, status, user_name, parent_graph, parent_task, created_us, ended_us, error,
      (SELECT count(*) FROM graph_task t WHERE t.realm = g.realm AND t.graph_id = g.graph_id) AS tasks,
      (SELECT count(*) FROM graph_task t WHERE t.realm = g.realm AND t.graph_id = g.graph_id
        AND t.status IN ('success', 'error', 'cancelled')) AS ended
      FROM graph g WHERE ${where.join(' AND ')} ORDER BY created_us DESC LIMIT 200`, params);
    fill(listBox, gs.length ? table([
      { title: 'graph', key: 'graph_id' },
      { title: 'status', key: 'status', cls: (g) => `state-${gState(g)}` },
      { title: 'tasks', value: (g) => `${g.ended} / ${g.tasks}`, num: true },
      { title: 'child of', value: (g) => (g.parent_graph ? `${g.parent_graph}/${g.parent_task}` : '') },
      { title: 'user', key: 'user_name' },
      { title: 'created', value: (g) => time(g.created_us) },
      { title: 'took', value: (g) => (g.ended_us ? `${((g.ended_us - g.created_us) / 1e3).toFixed(1)} ms` : ''), num: true },
      { title: 'error', key: 'error', wrap: true },
    ], gs, (g) => { state.view.graph = g.graph_id; follow(graphChannels()); }, (g) => g.graph_id === state.view.graph)
      : h('p', { class: 'muted' }, 'No task graphs (tabos graph submit, client.graphs).'));
    if (!state.view.graph) { fill(detail); return; }
    const tasks = await rows(`SELECT task, kind, target, status, attempts, node_id, child, error, started_us, ended_us
      FROM graph_task WHERE realm = $1 AND graph_id = $2 ORDER BY seq LIMIT 2000`, [state.realm, state.view.graph]);
    const edges = tasks.length <= GRAPH_DRAWN_MAX ? await rows(`SELECT src, dst FROM graph_edge
      WHERE realm = $1 AND graph_id = $2 LIMIT 20000`, [state.realm, state.view.graph]) : [];
    fill(detail, card(`Graph ${state.view.graph}`, dag(tasks, edges),
      table([
        { title: 'task', key: 'task' }, { title: 'kind', key: 'kind' }, { title: 'target', key: 'target' },
        { title: 'status', key: 'status', cls: (t) => `state-${taskState(t)}` },
        { title: 'runs', key: 'attempts', num: true }, { title: 'node', key: 'node_id' },
        { title: 'child', key: 'child' },
        { title: 'took', value: (t) => (t.ended_us && t.started_us ? `${((t.ended_us - t.started_us) / 1000).toFixed(1)} ms` : ''), num: true },
        { title: 'error', key: 'error', wrap: true },
      ], tasks)));
  };
  follow(graphChannels());
};

function graphChannels() {
  return state.view.graph ? ['graphs', `graph/${state.view.graph}`] : ['graphs'];
}

views.mailboxes = async (page) => {
  const list = h('div'), msgs = h('div');
  fill(page, card('Mailboxes', list), msgs);
  state.refresh = async () => {
    const boxes = await rows(`SELECT address, queued, queued_bytes, bytes_max, next_seq, created_us
      FROM mailbox WHERE realm = $1 ORDER BY address LIMIT 1000`, [state.realm]);
    fill(list, boxes.length ? table([
      { title: 'mailbox', key: 'address' }, { title: 'queued', key: 'queued', num: true },
      { title: 'bytes', value: (b) => `${bytes(b.queued_bytes)} of ${bytes(b.bytes_max)}`, num: true },
      { title: 'sent so far', value: (b) => b.next_seq - 1, num: true },
      { title: 'created', value: (b) => time(b.created_us) },
    ], boxes, (b) => { state.view.mailbox = b.address; follow(mailboxChannels()); }, (b) => b.address === state.view.mailbox)
      : h('p', { class: 'muted' }, 'No mailboxes.'));
    if (!state.view.mailbox) { fill(msgs); return; }
    const m = await rows(`SELECT seq, sender, message_id, sent_us, payload FROM message
      WHERE realm = $1 AND receiver = $2 ORDER BY seq LIMIT 200`, [state.realm, state.view.mailbox]);
    fill(msgs, card(`Queued in ${state.view.mailbox} (first 200)`, m.length ? table([
      { title: 'seq', key: 'seq', num: true }, { title: 'sender', key: 'sender' },
      { title: 'sent', value: (x) => time(x.sent_us) },
      { title: 'bytes', value: (x) => (x.payload && x.payload.bytes) || 0, num: true },
      { title: 'payload', value: (x) => show(x.payload).slice(0, 200), wrap: true },
    ], m) : h('p', { class: 'muted' }, 'Empty.')));
  };
  follow(mailboxChannels());
};

function mailboxChannels() {
  return state.view.mailbox ? [`mailbox/${state.view.mailbox}`] : ['procs'];
}

function crumbs(path, go) {
  const parts = path.split('/').filter(Boolean);
  return h('p', { class: 'crumbs' }, h('a', { onclick: () => go('/') }, '/'),
    parts.map((p, i) => [h('a', { onclick: () => go('/' + parts.slice(0, i + 1).join('/')) }, p), i < parts.length - 1 ? ' / ' : '']));
}

views.names = async (page) => {
  const dir = state.view.namesDir || '/';
  const box = h('div'), value = h('div');
  fill(page, card('Namespace', crumbs(dir, (d) => { state.view.namesDir = d; state.view.name = null; route(); }), box), value);
  state.refresh = async () => {
    const entries = await rows(`SELECT path, kind, version, owner, mode, session, modified_us,
      length(data) AS bytes FROM name_entry WHERE realm = $1 AND parent = $2 ORDER BY path LIMIT 2000`,
    [state.realm, dir]);
    fill(box, entries.length ? table([
      { title: 'name', value: (e) => e.path.split('/').pop() + (e.kind === 'dir' ? '/' : '') },
      { title: 'kind', key: 'kind' }, { title: 'version', key: 'version', num: true },
      { title: 'owner', key: 'owner' }, { title: 'mode', value: (e) => Number(e.mode).toString(8) },
      { title: 'ephemeral', value: (e) => (e.session ? 'yes' : '') },
      { title: 'bytes', key: 'bytes', num: true }, { title: 'modified', value: (e) => time(e.modified_us) },
    ], entries, (e) => {
      if (e.kind === 'dir') { state.view.namesDir = e.path; state.view.name = null; route(); } else { state.view.name = e.path; schedule(); }
    }, (e) => e.path === state.view.name) : h('p', { class: 'muted' }, 'Empty.'));
    if (state.view.name) {
      const v = await rows('SELECT data FROM name_entry WHERE realm = $1 AND path = $2', [state.realm, state.view.name]);
      fill(value, card(state.view.name, h('pre', {}, v.length ? show(v[0].data) : '(removed)')));
    } else fill(value);
  };
  follow([`names${dir === '/' ? '/' : dir}`]);
};

views.files = async (page) => {
  const dir = state.view.filesDir || '/';
  const box = h('div'), content = h('div');
  fill(page, card(`Files (as ${state.me.user || 'root'})`, crumbs(dir, (d) => { state.view.filesDir = d; route(); }), box), content);
  state.refresh = async () => {
    try {
      const r = await api('POST', '/api/fs/ls', { path: dir, realm: state.realm });
      fill(box, r.entries.length ? table([
        { title: 'name', value: (e) => e.path.split('/').pop() + (e.type === 'dir' ? '/' : '') },
        { title: 'owner', key: 'owner' }, { title: 'mode', value: (e) => Number(e.mode).toString(8) },
        { title: 'layout', key: 'layout' }, { title: 'size', value: (e) => bytes(e.size), num: true },
        { title: 'modified', value: (e) => time(e.mtime_us) },
      ], r.entries, async (e) => {
        if (e.type === 'dir') { state.view.filesDir = e.path; route(); return; }
        try {
          const f = await api('POST', '/api/fs/read', { path: e.path, realm: state.realm });
          fill(content, card(`${e.path} (${bytes(f.stat.size)}${f.truncated ? ', first part' : ''})`, h('pre', {}, f.text)));
        } catch (err) { fill(content, card(e.path, errorBox(err))); }
      }) : h('p', { class: 'muted' }, 'Empty.'), r.more ? h('p', { class: 'muted' }, 'More entries than shown.') : null);
    } catch (e) { fill(box, errorBox(e)); }
  };
  follow([]);
};

views.sql = async (page) => {
  const text = h('textarea', { id: 'sql-text', spellcheck: 'false' });
  text.value = state.view.sql || "SELECT realm, pid, state, program FROM ps ORDER BY spawn_us DESC LIMIT 20";
  const all = h('input', { type: 'checkbox', id: 'sql-all' });
  const out = h('div', { id: 'sql-out' });
  const run = async () => {
    state.view.sql = text.value;
    fill(out, h('p', { class: 'muted' }, 'Running…'));
    try {
      const r = await api('POST', '/api/sql', { sql: text.value, realm: all.checked ? '*' : state.realm });
      fill(out, h('p', { class: 'muted' }, `${r.rows.length} rows${r.truncated ? ' (cut: more rows than one answer carries)' : ''}`),
        table(r.columns.map((c, i) => ({ title: c, value: (row) => show(row[i]) })), r.rows));
    } catch (e) { fill(out, errorBox(e)); }
  };
  text.addEventListener('keydown', (e) => { if ((e.ctrlKey || e.metaKey) && e.key === 'Enter') run(); });
  fill(page, card('SQL (read-only; Ctrl+Enter runs)', text,
    h('p', {}, h('button', { id: 'sql-run', onclick: run }, 'Run'), ' ',
      state.me.operator ? h('label', {}, all, ' every realm') : null),
    out,
    h('p', { class: 'muted' }, 'Tables: proc, ps, proc_event, realm, realm_usage, worker, mailbox, message, name_entry, directory, procedure, kv, workflow, graph, graph_task, graph_edge, node (operator).')));
  state.refresh = null;
  follow([]);
};

// ----------------------------------------------------------------- routing

async function route() {
  const name = (location.hash || '#overview').slice(1);
  const view = views[name] || views.overview;
  for (const a of document.querySelectorAll('#nav a')) a.classList.toggle('active', a.getAttribute('href') === `#${name}`);
  state.refresh = null;
  state.onSample = null;
  const page = $('#page');
  fill(page, h('p', { class: 'muted' }, 'Loading…'));
  // Says when the view has loaded, and how (for people and for tests).
  document.body.dataset.view = name;
  document.body.dataset.loaded = '';
  try {
    await view(page);
    if (state.refresh) await state.refresh();
    document.body.dataset.loaded = 'ok';
  } catch (e) {
    if (!(e instanceof ApiError && e.status === 401)) fill(page, errorBox(e));
    document.body.dataset.loaded = 'error';
  }
}

function setRealm(r) {
  state.realm = r;
  $('#realm').value = r;
  state.view = { procFilter: state.view.procFilter };
}

async function signedIn(me) {
  state.me = me;
  $('#sign-in').hidden = true;
  $('#nav').hidden = false;
  $('#sign-out').hidden = false;
  $('#who').textContent = me.operator ? `operator · node ${me.node_id} · ${me.backend}`
    : `${me.user}@${me.realm} (${me.role}) · ${me.backend}`;
  const pick = $('#realm');
  if (me.operator) {
    const realms = await rows('SELECT realm FROM realm ORDER BY realm', [], '*');
    fill(pick, realms.map((r) => h('option', { value: r.realm }, r.realm)));
    $('#realm-pick').hidden = false;
    state.realm = realms.some((r) => r.realm === me.node_realm) ? me.node_realm : (realms[0] || {}).realm || '';
    pick.value = state.realm;
  } else {
    state.realm = me.realm;
    $('#realm-pick').hidden = true;
  }
  await route();
}

function signedOut(why) {
  if (state.events) { state.events.close(); state.events = null; }
  state.me = null;
  state.refresh = null;
  $('#live').className = 'live off';
  $('#nav').hidden = true;
  $('#sign-out').hidden = true;
  $('#realm-pick').hidden = true;
  $('#who').textContent = '';
  fill($('#page'));
  $('#sign-in').hidden = false;
  $('#sign-in-error').textContent = why || '';
}

async function start() {
  $('#sign-in').addEventListener('submit', async (e) => {
    e.preventDefault();
    $('#sign-in-error').textContent = '';
    try {
      const me = await api('POST', '/api/session', { token: $('#token').value });
      $('#token').value = '';
      await signedIn(me);
    } catch (err) { $('#sign-in-error').textContent = err.message; }
  });
  $('#sign-out').addEventListener('click', async () => {
    try { await api('DELETE', '/api/session'); } finally { signedOut(''); }
  });
  $('#realm').addEventListener('change', () => { setRealm($('#realm').value); route(); });
  window.addEventListener('hashchange', () => { if (state.me) route(); });
  try {
    await signedIn(await api('GET', '/api/session'));
  } catch {
    signedOut('');
  }
}

start();

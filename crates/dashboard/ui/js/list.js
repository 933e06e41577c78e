// A list of any kind, with the columns the API server gives kubectl (the meta.k8s.io Table
// form), kept live by a watch of the same form.

import { Live } from './api.js';
import { age, errorBox, h, label, replace } from './dom.js';

export function detailHref(res, ns, name) {
  return `#/r/${res.group || 'core'}/${res.name}/${encodeURIComponent(res.namespaced ? ns || '_' : '_')}/${encodeURIComponent(name)}`;
}

export function renderList(root, ctx) {
  const { res } = ctx;
  const ns = res.namespaced ? ctx.namespace : '';
  const filter = h('input', { type: 'search', class: 'filter', placeholder: 'Filter by name', 'aria-label': 'Filter by name' });
  const status = h('span', { class: 'live-status muted' });
  const body = h('div', { class: 'list-body' }, h('p', { class: 'muted' }, 'Loading…'));
  replace(root,
    h('div', { class: 'page-head' },
      h('h1', {}, label(res)),
      h('span', { class: 'muted' }, res.namespaced ? (ns ? `namespace ${ns}` : 'all namespaces') : 'cluster-wide'),
      h('span', { class: 'spacer' }),
      filter,
      status),
    body);

  let live = null;
  let table = true;
  const draw = () => {
    if (!live) return;
    if (live.error && !live.loaded) {
      // A kind served without tables (some aggregated APIs): plain objects instead.
      if (table && live.error.code === 406) { table = false; live.stop(); live = start(); return; }
      replace(body, errorBox(live.error));
      replace(status);
      return;
    }
    replace(status, live.error ? errorBox(live.error, 'Live updates paused') : `${live.items.size} ${live.items.size === 1 ? 'item' : 'items'} · live`);
    const f = filter.value.trim().toLowerCase();
    const rows = live.list().filter((r) => !f || nameOf(r, table).toLowerCase().includes(f));
    replace(body, table ? tableView(res, ns, live.columns, rows) : plainView(res, ns, rows));
  };
  const start = () => new Live({
    path: res.path(ns),
    table,
    onChange: draw,
  }).start();
  live = start();
  filter.addEventListener('input', draw);
  // Ages move on while nothing changes.
  const tick = setInterval(draw, 15000);
  return () => { clearInterval(tick); if (live) live.stop(); };
}

function nameOf(row, table) {
  const md = (table ? row.object && row.object.metadata : row.metadata) || {};
  return md.name || (row.cells ? String(row.cells[0]) : '');
}

function tableView(res, ns, columns, rows) {
  if (!rows.length) return h('p', { class: 'empty' }, 'No objects.');
  // The columns kubectl shows without -o wide.
  const shown = columns.map((c, i) => ({ c, i })).filter(({ c }) => !c.priority);
  const showNs = res.namespaced && !ns;
  const head = h('tr', {}, showNs ? h('th', {}, 'Namespace') : null, shown.map(({ c }) => h('th', { title: c.description || '' }, c.name)));
  const body = rows.map((row) => {
    const md = (row.object && row.object.metadata) || {};
    const name = md.name || String((row.cells || [])[0] || '');
    const cells = shown.map(({ c, i }, k) => {
      let v = (row.cells || [])[i];
      if (c.name === 'Age' && md.creationTimestamp) v = age(md.creationTimestamp);
      const text = formatCell(v);
      if (k === 0) return h('td', {}, h('a', { href: detailHref(res, md.namespace, name) }, text));
      return h('td', { class: c.type === 'integer' || c.type === 'number' ? 'num' : '' }, text);
    });
    return h('tr', { dataset: { name } }, showNs ? h('td', {}, md.namespace || '') : null, cells);
  });
  return h('table', { class: 'grid' }, h('thead', {}, head), h('tbody', {}, body));
}

function formatCell(v) {
  if (v === null || v === undefined) return '<none>';
  if (Array.isArray(v)) return v.join(', ');
  if (typeof v === 'object') return JSON.stringify(v);
  return String(v);
}

function plainView(res, ns, objs) {
  if (!objs.length) return h('p', { class: 'empty' }, 'No objects.');
  const showNs = res.namespaced && !ns;
  return h('table', { class: 'grid' },
    h('thead', {}, h('tr', {}, showNs ? h('th', {}, 'Namespace') : null, h('th', {}, 'Name'), h('th', {}, 'Age'))),
    h('tbody', {}, objs.map((o) => h('tr', { dataset: { name: o.metadata.name } },
      showNs ? h('td', {}, o.metadata.namespace || '') : null,
      h('td', {}, h('a', { href: detailHref(res, o.metadata.namespace, o.metadata.name) }, o.metadata.name)),
      h('td', {}, age(o.metadata.creationTimestamp))))));
}

// The overview: nodes and whether they are Ready, namespaces, the workloads with their ready
// and desired counts, and the recent Warning events. Kept live by watches (or polling over
// HTTP/1.1, where the browser's six connections would not carry eight watches).

import { Live } from './api.js';
import { age, badge, errorBox, h, replace, section, table } from './dom.js';

// A workload's [ready, desired, health] where health is ok, progressing, failing or idle.
export function workloadHealth(kind, o) {
  const s = o.status || {};
  const spec = o.spec || {};
  const observed = (s.observedGeneration || 0) >= (o.metadata.generation || 0);
  switch (kind) {
    case 'Deployment':
    case 'StatefulSet':
    case 'ReplicaSet': {
      const desired = spec.replicas ?? 1;
      const ready = s.readyReplicas || 0;
      const updated = kind === 'ReplicaSet' ? ready : (s.updatedReplicas || 0);
      const stuck = (s.conditions || []).some((c) => c.type === 'Progressing' && c.status === 'False');
      if (desired === 0) return [ready, desired, ready === 0 ? 'idle' : 'progressing'];
      if (stuck || (ready === 0 && observed && ageSeconds(o) > 120)) return [ready, desired, 'failing'];
      if (ready >= desired && updated >= desired && observed) return [ready, desired, 'ok'];
      return [ready, desired, 'progressing'];
    }
    case 'DaemonSet': {
      const desired = s.desiredNumberScheduled || 0;
      const ready = s.numberReady || 0;
      if (desired === 0) return [ready, desired, 'idle'];
      if (ready >= desired && observed && (s.updatedNumberScheduled ?? desired) >= desired) return [ready, desired, 'ok'];
      return [ready, desired, 'progressing'];
    }
    case 'Job': {
      const desired = spec.completions ?? (spec.parallelism ?? 1);
      const done = s.succeeded || 0;
      const conds = s.conditions || [];
      const is = (t) => conds.some((c) => c.type === t && c.status === 'True');
      if (is('Failed')) return [done, desired, 'failing'];
      if (is('Complete')) return [done, desired, 'ok'];
      if (spec.suspend) return [done, desired, 'idle'];
      return [done, desired, 'progressing'];
    }
    default:
      return [0, 0, 'idle'];
  }
}

function ageSeconds(o) {
  const t = Date.parse(o.metadata.creationTimestamp || '');
  return Number.isNaN(t) ? 0 : (Date.now() - t) / 1000;
}

const HEALTH_LABEL = { ok: 'Healthy', progressing: 'Progressing', failing: 'Failing', idle: 'Idle' };

export function healthBadge(health) {
  return badge(HEALTH_LABEL[health] || health, `health-${health}`);
}

export function nodeReady(node) {
  const c = ((node.status || {}).conditions || []).find((x) => x.type === 'Ready');
  if (!c) return ['Unknown', 'warn'];
  if (c.status === 'True') return [node.spec && node.spec.unschedulable ? 'Ready, cordoned' : 'Ready', 'ok'];
  return [c.status === 'False' ? 'NotReady' : 'Unknown', 'bad'];
}

function nodeRoles(node) {
  const roles = Object.keys(node.metadata.labels || {})
    .filter((l) => l.startsWith('node-role.kubernetes.io/'))
    .map((l) => l.slice('node-role.kubernetes.io/'.length))
    .filter(Boolean);
  return roles.length ? roles.join(',') : '<none>';
}

function eventTime(e) {
  return e.lastTimestamp || (e.series && e.series.lastObservedTime) || e.eventTime || e.firstTimestamp || e.metadata.creationTimestamp;
}

const WORKLOADS = [
  ['apps', 'deployments', 'Deployment'],
  ['apps', 'statefulsets', 'StatefulSet'],
  ['apps', 'daemonsets', 'DaemonSet'],
  ['batch', 'jobs', 'Job'],
];

export function renderOverview(root, ctx) {
  const ns = ctx.namespace;
  const disc = ctx.discovery;
  const poll = !ctx.live;
  const lives = [];
  const slots = {
    cards: h('div', { class: 'cards' }),
    nodes: h('div', {}),
    namespaces: h('div', {}),
    workloads: h('div', {}),
    events: h('div', {}),
  };
  replace(root,
    h('div', { class: 'page-head' },
      h('h1', {}, 'Overview'),
      h('span', { class: 'muted' }, ns ? `namespace ${ns}` : 'all namespaces')),
    slots.cards,
    h('div', { class: 'columns' },
      section('Nodes', slots.nodes),
      section('Namespaces', slots.namespaces)),
    section('Workloads', slots.workloads),
    section('Recent warnings', slots.events));

  const start = (res, query, onChange) => {
    if (!res) return null;
    const live = new Live({ path: res.path(ns), query, poll, onChange }).start();
    lives.push(live);
    return live;
  };

  const nodesRes = disc.get('', 'nodes');
  const nsRes = disc.get('', 'namespaces');
  const podsRes = disc.get('', 'pods');
  const eventsRes = disc.get('', 'events');
  const data = { nodes: null, namespaces: null, pods: null, workloads: {} };

  const cards = () => {
    const card = (title, value, detail, kind) => h('div', { class: `stat ${kind || ''}` },
      h('div', { class: 'stat-title' }, title), h('div', { class: 'stat-value' }, value), h('div', { class: 'stat-detail' }, detail));
    const list = [];
    if (data.nodes && data.nodes.loaded) {
      const nodes = data.nodes.list();
      const ready = nodes.filter((n) => nodeReady(n)[1] === 'ok').length;
      list.push(card('Nodes', `${ready}/${nodes.length}`, 'ready', ready === nodes.length ? 'ok' : 'bad'));
    }
    if (data.pods && data.pods.loaded) {
      const pods = data.pods.list();
      const running = pods.filter((p) => (p.status || {}).phase === 'Running').length;
      const failed = pods.filter((p) => (p.status || {}).phase === 'Failed').length;
      list.push(card('Pods', `${running}/${pods.length}`, failed ? `running, ${failed} failed` : 'running', failed ? 'bad' : ''));
    }
    const all = Object.values(data.workloads).flatMap((w) => (w.live && w.live.loaded ? w.live.list().map((o) => workloadHealth(w.kind, o)[2]) : []));
    if (all.length || Object.keys(data.workloads).length) {
      const healthy = all.filter((x) => x === 'ok' || x === 'idle').length;
      list.push(card('Workloads', `${healthy}/${all.length}`, 'healthy', healthy === all.length ? 'ok' : 'warn'));
    }
    if (data.namespaces && data.namespaces.loaded) {
      list.push(card('Namespaces', String(data.namespaces.items.size), 'in the cluster'));
    }
    replace(slots.cards, list);
  };

  data.nodes = start(nodesRes, {}, (live) => {
    if (live.error && !live.loaded) { replace(slots.nodes, errorBox(live.error)); cards(); return; }
    replace(slots.nodes, paused(live), table([
      { title: 'Name', cell: (n) => h('a', { href: `#/r/core/nodes/_/${encodeURIComponent(n.metadata.name)}` }, n.metadata.name) },
      { title: 'Status', cell: (n) => { const [t, k] = nodeReady(n); return badge(t, k); } },
      { title: 'Roles', cell: nodeRoles },
      { title: 'Version', cell: (n) => ((n.status || {}).nodeInfo || {}).kubeletVersion || '' },
      { title: 'Age', cell: (n) => age(n.metadata.creationTimestamp) },
    ], live.list(), { empty: 'No nodes have registered.' }));
    cards();
  });

  data.namespaces = start(nsRes, {}, (live) => {
    if (live.error && !live.loaded) { replace(slots.namespaces, errorBox(live.error)); cards(); return; }
    replace(slots.namespaces, paused(live), table([
      { title: 'Name', cell: (n) => h('a', { href: `#/r/core/namespaces/_/${encodeURIComponent(n.metadata.name)}` }, n.metadata.name) },
      { title: 'Status', cell: (n) => { const p = (n.status || {}).phase || ''; return badge(p, p === 'Active' ? 'ok' : 'warn'); } },
      { title: 'Age', cell: (n) => age(n.metadata.creationTimestamp) },
    ], live.list()));
    cards();
  });

  data.pods = start(podsRes, {}, () => cards());

  const renderWorkloads = () => {
    const rows = [];
    const errors = [];
    for (const w of Object.values(data.workloads)) {
      if (w.live.error) errors.push(errorBox(w.live.error, w.live.loaded ? `${w.kind}: live updates paused` : w.kind));
      if (!w.live.loaded) continue;
      for (const o of w.live.list()) rows.push({ w, o, hl: workloadHealth(w.kind, o) });
    }
    const rank = { failing: 0, progressing: 1, ok: 2, idle: 3 };
    rows.sort((a, b) => rank[a.hl[2]] - rank[b.hl[2]] || a.o.metadata.name.localeCompare(b.o.metadata.name));
    replace(slots.workloads, errors, table([
      { title: 'Kind', cell: (r) => r.w.kind },
      ns ? null : { title: 'Namespace', cell: (r) => r.o.metadata.namespace },
      { title: 'Name', cell: (r) => h('a', { href: `#/r/${r.w.res.group || 'core'}/${r.w.res.name}/${encodeURIComponent(r.o.metadata.namespace)}/${encodeURIComponent(r.o.metadata.name)}` }, r.o.metadata.name) },
      { title: 'Ready', cell: (r) => `${r.hl[0]}/${r.hl[1]}` },
      { title: 'Health', cell: (r) => healthBadge(r.hl[2]) },
      { title: 'Age', cell: (r) => age(r.o.metadata.creationTimestamp) },
    ].filter(Boolean), rows, { empty: 'No deployments, stateful sets, daemon sets or jobs here.', rowClass: (r) => `health-row-${r.hl[2]}` }));
    cards();
  };
  for (const [group, name, kind] of WORKLOADS) {
    const res = disc.get(group, name);
    if (!res) continue;
    const w = { res, kind, live: null };
    data.workloads[kind] = w;
    w.live = start(res, {}, renderWorkloads);
  }

  start(eventsRes, { fieldSelector: 'type=Warning' }, (live) => {
    if (live.error && !live.loaded) { replace(slots.events, errorBox(live.error)); return; }
    const events = live.list().sort((a, b) => String(eventTime(b)).localeCompare(String(eventTime(a)))).slice(0, 25);
    replace(slots.events, paused(live), table([
      { title: 'Last seen', cell: (e) => age(eventTime(e)) },
      ns ? null : { title: 'Namespace', cell: (e) => e.metadata.namespace },
      { title: 'Object', cell: (e) => objectLink(disc, e.involvedObject || {}) },
      { title: 'Reason', cell: (e) => e.reason || '' },
      { title: 'Message', class: 'wrap', cell: (e) => e.message || '' },
      { title: 'Count', class: 'num', cell: (e) => String(e.count || (e.series && e.series.count) || 1) },
    ].filter(Boolean), events, { empty: 'No warnings.' }));
  });

  return () => lives.forEach((l) => l && l.stop());
}

// A note that a loaded collection is not being kept up to date at the moment.
export function paused(live) {
  return live.error && live.loaded ? errorBox(live.error, 'Live updates paused') : null;
}

// A link to an event's object, or its kind/name as text when the kind is not served.
export function objectLink(disc, ref) {
  const text = `${(ref.kind || '').toLowerCase()}/${ref.name || ''}`;
  const res = disc.forKind(ref.apiVersion || 'v1', ref.kind);
  if (!res || !ref.name) return text;
  const ns = res.namespaced ? ref.namespace || '_' : '_';
  return h('a', { href: `#/r/${res.group || 'core'}/${res.name}/${encodeURIComponent(ns)}/${encodeURIComponent(ref.name)}` }, text);
}

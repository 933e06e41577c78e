// The dashboard's shell: sign-in, the side bar of kinds (from API discovery), the namespace
// selector, and the router that puts a view in the main area.
//
// Routes (in the URL's fragment):
//   #/login                               sign in
//   #/overview                            nodes, workloads, warnings
//   #/r/GROUP/RESOURCE                    a list (GROUP is `core` for the legacy group)
//   #/r/GROUP/RESOURCE/NS/NAME[/TAB]      an object (NS is `_` for cluster-scoped kinds);
//                                         TAB is yaml or logs

import { discover, get, Live, multiplexed, onUnauthorized, session } from './api.js';
import { clearToasts, errorBox, h, label, replace, toast } from './dom.js';
import { renderLogin, setLoginMessage } from './login.js';
import { renderOverview } from './overview.js';
import { renderList } from './list.js';
import { renderDetail } from './detail.js';

const NS_KEY = 'capstan.namespace';
const ALL = '';

const state = {
  discovery: null,
  cleanup: null,
  namespaces: null,
  seq: 0,
  shell: null,
};

export const ctx = {
  get namespace() {
    const v = sessionStorage.getItem(NS_KEY);
    return v === null ? 'default' : v;
  },
  set namespace(v) { sessionStorage.setItem(NS_KEY, v); },
  get discovery() { return state.discovery; },
  get live() { return multiplexed(); },
  go(hash) { location.hash = hash; },
  // Call when the view replaced itself (so the next route cleans up what it started).
  onCleanup(f) { state.cleanup = f; },
};

function route() {
  const hash = location.hash.replace(/^#/, '') || '/overview';
  const parts = hash.split('/').filter(Boolean).map(decodeURIComponent);
  return parts;
}

function signOut(message) {
  session.clear();
  clearToasts();
  state.discovery = null;
  setLoginMessage(message || '');
  if (location.hash !== '#/login') location.hash = '#/login';
  else render();
}

onUnauthorized((err) => {
  if (route()[0] === 'login') return;
  signOut(`${err.message || 'Unauthorized'} — sign in again.`);
});

// Show unexpected failures instead of a blank page.
window.addEventListener('error', (e) => toast(`Unexpected error: ${e.message}`, 'error'));
window.addEventListener('unhandledrejection', (e) => {
  const r = e.reason;
  if (r && r.name === 'AbortError') return;
  toast(`Unexpected error: ${(r && r.message) || r}`, 'error');
});

const CATEGORIES = [
  ['Workloads', ['core/pods', 'apps/deployments', 'apps/replicasets', 'apps/statefulsets', 'apps/daemonsets', 'batch/jobs', 'batch/cronjobs']],
  ['Network', ['core/services', 'core/endpoints', 'discovery.k8s.io/endpointslices', 'networking.k8s.io/ingresses', 'networking.k8s.io/ingressclasses', 'networking.k8s.io/networkpolicies']],
  ['Config and storage', ['core/configmaps', 'core/secrets', 'core/persistentvolumeclaims', 'core/persistentvolumes', 'storage.k8s.io/storageclasses', 'storage.k8s.io/csidrivers', 'storage.k8s.io/volumeattachments', 'core/resourcequotas', 'core/limitranges']],
  ['Access control', ['core/serviceaccounts', 'rbac.authorization.k8s.io/roles', 'rbac.authorization.k8s.io/rolebindings', 'rbac.authorization.k8s.io/clusterroles', 'rbac.authorization.k8s.io/clusterrolebindings']],
  ['Cluster', ['core/nodes', 'core/namespaces', 'core/events', 'coordination.k8s.io/leases', 'apiextensions.k8s.io/customresourcedefinitions', 'scheduling.k8s.io/priorityclasses']],
];

function sidebar(discovery, current) {
  const listed = new Set();
  const link = (r) => {
    const href = `#/r/${r.group || 'core'}/${r.name}`;
    return h('a', { href, class: current === r.id ? 'active' : '', title: `${r.kind} (${r.groupVersion})` }, label(r));
  };
  const blocks = [h('a', { href: '#/overview', class: current === 'overview' ? 'active' : '' }, 'Overview')];
  for (const [title, ids] of CATEGORIES) {
    const rs = ids.map((id) => discovery.resources.find((r) => r.id === id)).filter((r) => r && r.can('list'));
    rs.forEach((r) => listed.add(r.id));
    if (rs.length) blocks.push(h('div', { class: 'nav-group' }, h('h3', {}, title), rs.map(link)));
  }
  // Everything else, by API group: other built-in kinds, then custom resources.
  const rest = discovery.resources.filter((r) => !listed.has(r.id) && r.can('list'));
  const groups = [...new Set(rest.map((r) => r.group || 'core'))].sort((a, b) => {
    const ka = a.endsWith('.k8s.io') || a === 'core' ? 0 : 1;
    const kb = b.endsWith('.k8s.io') || b === 'core' ? 0 : 1;
    return ka - kb || a.localeCompare(b);
  });
  for (const g of groups) {
    const rs = rest.filter((r) => (r.group || 'core') === g).sort((a, b) => a.kind.localeCompare(b.kind));
    blocks.push(h('div', { class: 'nav-group' }, h('h3', {}, g), rs.map(link)));
  }
  return blocks;
}

// The namespace selector: the namespaces the user may list, or a text field if they may not.
function namespaceSelector(onPick) {
  const current = ctx.namespace;
  const wrap = h('label', { class: 'ns-select' }, 'Namespace ');
  const pick = (v) => { ctx.namespace = v; onPick(); };
  const names = state.namespaces;
  if (names) {
    const options = [h('option', { value: ALL }, 'All namespaces')];
    const all = names.includes(current) || current === ALL ? names : [current, ...names];
    for (const n of all) options.push(h('option', { value: n }, n));
    const sel = h('select', { id: 'namespace', onchange: (e) => pick(e.target.value) }, options);
    sel.value = current;
    wrap.appendChild(sel);
  } else {
    const input = h('input', {
      id: 'namespace',
      value: current,
      placeholder: 'all namespaces',
      size: 14,
      onchange: (e) => pick(e.target.value.trim()),
    });
    wrap.appendChild(input);
  }
  return wrap;
}

let namespaceWatch = null;
function watchNamespaces() {
  if (namespaceWatch) return;
  namespaceWatch = new Live({
    path: '/api/v1/namespaces',
    poll: !multiplexed(),
    onChange: (live) => {
      const before = JSON.stringify(state.namespaces);
      state.namespaces = live.error && !live.loaded ? null : live.list().map((n) => n.metadata.name);
      if (JSON.stringify(state.namespaces) !== before) refreshTopbar();
    },
    onError: (err) => {
      // Without the right to list namespaces the selector is a text field.
      if (err.code === 403) { namespaceWatch.stop(); state.namespaces = null; refreshTopbar(); }
    },
  }).start();
}

function refreshTopbar() {
  if (!state.shell) return;
  replace(state.shell.nsSlot, namespaceSelector(render));
}

function buildShell(root) {
  const nav = h('nav', { class: 'sidebar', 'aria-label': 'Kinds' });
  const main = h('main', { class: 'view', id: 'view' });
  const nsSlot = h('span', { class: 'ns-slot' });
  const top = h('header', { class: 'topbar' },
    h('a', { class: 'brand', href: '#/overview' }, h('img', { src: '/favicon.svg', alt: '' }), 'capstan'),
    nsSlot,
    h('span', { class: 'spacer' }),
    h('span', { class: 'user', title: 'Signed in as' }, session.user || 'signed in'),
    h('button', { type: 'button', id: 'sign-out', onclick: () => signOut('') }, 'Sign out'));
  replace(root, h('div', { class: 'shell' }, top, h('div', { class: 'body' }, nav, main)));
  state.shell = { nav, main, nsSlot };
  refreshTopbar();
}

async function render() {
  const seq = ++state.seq;
  if (state.cleanup) {
    try { state.cleanup(); } catch { /* the old view is gone anyway */ }
    state.cleanup = null;
  }
  const root = document.getElementById('app');
  const parts = route();
  if (!session.token || parts[0] === 'login') {
    if (namespaceWatch) { namespaceWatch.stop(); namespaceWatch = null; }
    state.shell = null;
    state.namespaces = null;
    if (parts[0] !== 'login') { location.hash = '#/login'; return; }
    renderLogin(root, { onSignedIn: () => { location.hash = '#/overview'; } });
    return;
  }
  if (!state.shell) buildShell(root);
  watchNamespaces();
  const { main, nav } = state.shell;
  if (!state.discovery) {
    replace(main, h('p', { class: 'muted' }, 'Loading…'));
    try {
      const found = await discover();
      if (seq !== state.seq) return;
      state.discovery = found;
    } catch (err) {
      if (seq !== state.seq) return;
      replace(main, errorBox(err, 'API discovery failed'));
      return;
    }
  }
  const disc = state.discovery;
  if (parts[0] === 'r') {
    const [, group, name, ns, objName, tab] = parts;
    let res = disc.get(group === 'core' ? '' : group, name);
    if (!res) {
      // A kind added since (a new CRD): discover again once.
      try { state.discovery = await discover(); } catch { /* keep the old one */ }
      if (seq !== state.seq) return;
      res = state.discovery.get(group === 'core' ? '' : group, name);
    }
    replace(nav, sidebar(state.discovery, res ? res.id : ''));
    if (!res) {
      replace(main, errorBox(new Error(`The API server serves no resource "${name}" in group "${group}".`)));
      return;
    }
    if (objName) {
      state.cleanup = renderDetail(main, { ...viewCtx(), res, ns: ns === '_' ? '' : ns, name: objName, tab: tab || '' });
    } else {
      state.cleanup = renderList(main, { ...viewCtx(), res });
    }
    return;
  }
  replace(nav, sidebar(disc, 'overview'));
  state.cleanup = renderOverview(main, viewCtx());
}

function viewCtx() {
  return {
    namespace: ctx.namespace,
    discovery: state.discovery,
    live: multiplexed(),
    go: ctx.go,
  };
}

window.addEventListener('hashchange', () => { render(); });
render();

// Keep a check that the dashboard server itself is there (shown as a banner when it is not).
setInterval(async () => {
  if (!session.token) return;
  try { await get('/version'); document.body.classList.remove('offline'); } catch (e) {
    if (e && e.code === 0) document.body.classList.add('offline');
  }
}, 30000);

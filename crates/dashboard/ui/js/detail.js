// One object: a summary for its kind, its conditions, its pods (workloads), its events, a YAML
// editor, logs (pods), and scale and delete. Everything shown is kept live by watches.

import { Live, request } from './api.js';
import { age, badge, chips, dialog, errorBox, facts, h, label, replace, section, table, toast } from './dom.js';
import { dump } from './yaml.js';
import { renderLogs } from './logs.js';
import { detailHref } from './list.js';
import { healthBadge, nodeReady, objectLink, paused, workloadHealth } from './overview.js';

const WORKLOAD_KINDS = new Set(['Deployment', 'ReplicaSet', 'StatefulSet', 'DaemonSet', 'Job']);

export function renderDetail(root, ctx) {
  const { res, ns, name, discovery } = ctx;
  const tab = ['yaml', 'logs'].includes(ctx.tab) && (ctx.tab !== 'logs' || res.hasLog) ? ctx.tab : '';
  const base = detailHref(res, ns, name);
  const stops = [];
  const head = h('div', { class: 'page-head' });
  const content = h('div', { class: 'detail-body' });
  const tabLink = (t, text) => h('a', { href: t ? `${base}/${t}` : base, class: `tab ${tab === t ? 'active' : ''}`, id: `tab-${t || 'summary'}` }, text);
  replace(root,
    head,
    h('nav', { class: 'tabs' }, tabLink('', 'Summary'), tabLink('yaml', 'YAML'), res.hasLog ? tabLink('logs', 'Logs') : null),
    content);

  let current = null;
  let gone = false;
  const drawHead = () => {
    const actions = [];
    if (current && res.scalable) actions.push(h('button', { type: 'button', id: 'scale', onclick: () => scaleDialog(res, ns, name, current) }, 'Scale'));
    if (res.can('update')) actions.push(h('a', { class: 'button', href: `${base}/yaml`, id: 'edit' }, 'Edit'));
    if (res.can('delete')) actions.push(h('button', { type: 'button', class: 'danger', id: 'delete', onclick: () => deleteDialog(res, ns, name, ctx) }, 'Delete'));
    const [hl, hlText] = current ? stateOf(res, current) : [null, null];
    replace(head,
      h('div', { class: 'title' },
        h('a', { class: 'kind', href: `#/r/${res.group || 'core'}/${res.name}` }, label(res)),
        h('h1', {}, name, hl ? ' ' : null, hl ? badge(hlText, hl) : null),
        h('span', { class: 'muted' }, res.namespaced ? `namespace ${ns}` : 'cluster-wide', current && current.metadata.deletionTimestamp ? ' · terminating' : '')),
      h('span', { class: 'spacer' }),
      h('div', { class: 'actions' }, actions));
  };
  drawHead();

  // The object itself, watched by name.
  let onObject = () => {};
  const objectLive = new Live({
    path: res.path(ns),
    query: { fieldSelector: `metadata.name=${name}` },
    onChange: (live) => {
      if (live.error && !live.loaded) { replace(content, errorBox(live.error)); return; }
      const obj = live.list()[0] || null;
      gone = live.loaded && !obj;
      current = obj;
      drawHead();
      onObject(obj, gone);
    },
  }).start();
  stops.push(() => objectLive.stop());

  if (tab === 'yaml') {
    onObject = yamlEditor(content, res, ns, name);
  } else if (tab === 'logs') {
    let started = false;
    onObject = (obj) => {
      if (!obj || started) return;
      started = true;
      stops.push(renderLogs(content, { res, ns, name, pod: obj }));
    };
  } else {
    onObject = summary(content, res, ns, name, discovery, stops);
  }
  return () => stops.forEach((f) => f());
}

// A badge for the object's state, when its kind has one.
function stateOf(res, o) {
  if (WORKLOAD_KINDS.has(res.kind) && res.group !== '') {
    const [ready, desired, hl] = workloadHealth(res.kind, o);
    return [`health-${hl}`, `${ready}/${desired} ${hl === 'ok' ? 'ready' : hl}`];
  }
  if (res.kind === 'Pod' && !res.group) {
    const s = podStatus(o);
    return [s === 'Running' || s === 'Completed' || s === 'Succeeded' ? 'ok' : s === 'Pending' || s.startsWith('Init') || s === 'ContainerCreating' ? 'warn' : 'bad', s];
  }
  if (res.kind === 'Node' && !res.group) {
    const [t, k] = nodeReady(o);
    return [k, t];
  }
  return [null, null];
}

// kubectl's STATUS column for a pod.
export function podStatus(p) {
  const s = p.status || {};
  if (p.metadata.deletionTimestamp) return 'Terminating';
  let reason = s.reason || s.phase || 'Unknown';
  const inits = s.initContainerStatuses || [];
  for (let i = 0; i < inits.length; i += 1) {
    const st = inits[i].state || {};
    if (st.terminated && st.terminated.exitCode === 0) continue;
    if (st.terminated) return `Init:${st.terminated.reason || 'Error'}`;
    if (st.waiting && st.waiting.reason && st.waiting.reason !== 'PodInitializing') return `Init:${st.waiting.reason}`;
    return `Init:${i}/${inits.length}`;
  }
  for (const c of s.containerStatuses || []) {
    const st = c.state || {};
    if (st.waiting && st.waiting.reason) reason = st.waiting.reason;
    else if (st.terminated && st.terminated.reason) reason = st.terminated.reason;
  }
  return reason;
}

function podReady(p) {
  const cs = (p.status || {}).containerStatuses || [];
  const total = ((p.spec || {}).containers || []).length;
  return `${cs.filter((c) => c.ready).length}/${total}`;
}

function restarts(p) {
  return String(((p.status || {}).containerStatuses || []).reduce((n, c) => n + (c.restartCount || 0), 0));
}

// A label selector's query form ("app=web,tier in (a,b)").
export function selectorString(sel) {
  if (!sel) return null;
  const parts = Object.entries(sel.matchLabels || {}).map(([k, v]) => `${k}=${v}`);
  for (const e of sel.matchExpressions || []) {
    const vals = (e.values || []).join(',');
    if (e.operator === 'In') parts.push(`${e.key} in (${vals})`);
    else if (e.operator === 'NotIn') parts.push(`${e.key} notin (${vals})`);
    else if (e.operator === 'Exists') parts.push(e.key);
    else if (e.operator === 'DoesNotExist') parts.push(`!${e.key}`);
  }
  return parts.join(',');
}

// The summary tab. Returns the function that redraws it for a new version of the object.
function summary(root, res, ns, name, disc, stops) {
  const main = h('div', {});
  const podsSlot = h('div', {});
  const eventsSlot = h('div', {}, h('p', { class: 'muted' }, 'Loading…'));
  let podsSection = null;
  let annotationsOpen = false;
  replace(root, main);

  let eventsLive = null;
  let eventsUid = null;
  let podsLive = null;
  let podsSelector = null;
  stops.push(() => { if (eventsLive) eventsLive.stop(); if (podsLive) podsLive.stop(); });

  const eventsSection = section('Events', eventsSlot);
  return (obj, gone) => {
    if (gone) {
      replace(main, errorBox({ code: 404, reason: 'NotFound', message: `${res.kind} "${name}" does not exist (any more).` }));
      return;
    }
    if (!obj) return;
    const md = obj.metadata || {};
    const annotations = { ...(md.annotations || {}) };
    const details = h('details', { class: 'annotations', ontoggle: (e) => { annotationsOpen = e.target.open; } },
      h('summary', {}, `Annotations (${Object.keys(annotations).length})`),
      h('dl', { class: 'facts' }, Object.entries(annotations).map(([k, v]) => [h('dt', {}, k), h('dd', { class: 'wrap' }, v)])));
    details.open = annotationsOpen;
    const owners = (md.ownerReferences || []).map((o) => objectLink(disc, { ...o, namespace: md.namespace }));
    const meta = section('Metadata', facts([
      ['Name', md.name],
      ['Namespace', md.namespace],
      ['Created', md.creationTimestamp ? `${age(md.creationTimestamp)} ago (${md.creationTimestamp})` : ''],
      ['UID', md.uid],
      ['Labels', chips(md.labels)],
      ['Owners', owners.length ? h('span', { class: 'chips' }, owners) : ''],
    ]), Object.keys(annotations).length ? details : null);

    const kindBlocks = kindSummary(res, obj, disc);
    const conditions = ((obj.status || {}).conditions || []);
    const condBlock = conditions.length ? section('Conditions', table([
      { title: 'Type', cell: (c) => c.type },
      { title: 'Status', cell: (c) => badge(c.status, conditionKind(c)) },
      { title: 'Reason', cell: (c) => c.reason || '' },
      { title: 'Message', class: 'wrap', cell: (c) => c.message || '' },
      { title: 'Last change', cell: (c) => age(c.lastTransitionTime) },
    ], conditions)) : null;

    // Pods of a workload, by its selector.
    if (WORKLOAD_KINDS.has(res.kind) && res.group) {
      const sel = selectorString((obj.spec || {}).selector);
      const podsRes = disc.get('', 'pods');
      if (podsRes && sel && sel !== podsSelector) {
        podsSelector = sel;
        if (podsLive) podsLive.stop();
        podsLive = new Live({
          path: podsRes.path(md.namespace),
          query: { labelSelector: sel },
          onChange: (live) => {
            if (live.error && !live.loaded) { replace(podsSlot, errorBox(live.error)); return; }
            replace(podsSlot, paused(live), podsTable(podsRes, live.list()));
          },
        }).start();
      }
      podsSection = podsSection || section('Pods', podsSlot);
    }

    // Events about this object (by UID: a namesake created later has its own).
    if (md.uid && md.uid !== eventsUid) {
      eventsUid = md.uid;
      if (eventsLive) eventsLive.stop();
      const evRes = disc.get('', 'events');
      if (evRes) {
        eventsLive = new Live({
          path: evRes.path(md.namespace || ''),
          query: { fieldSelector: `involvedObject.uid=${md.uid}` },
          onChange: (live) => {
            if (live.error && !live.loaded) { replace(eventsSlot, errorBox(live.error)); return; }
            const note = paused(live);
            const evs = live.list().sort((a, b) => String(evTime(b)).localeCompare(String(evTime(a))));
            replace(eventsSlot, note, table([
              { title: 'Type', cell: (e) => badge(e.type || 'Normal', e.type === 'Warning' ? 'warn' : '') },
              { title: 'Reason', cell: (e) => e.reason || '' },
              { title: 'Message', class: 'wrap', cell: (e) => e.message || '' },
              { title: 'From', cell: (e) => e.reportingComponent || (e.source || {}).component || '' },
              { title: 'Count', class: 'num', cell: (e) => String(e.count || (e.series && e.series.count) || 1) },
              { title: 'Last seen', cell: (e) => age(evTime(e)) },
            ], evs, { empty: 'No events.' }));
          },
        }).start();
      }
    }
    replace(main, meta, kindBlocks, condBlock, podsSection, eventsSection);
  };
}

// Most conditions are good when True; pressure, unavailability and failure when False.
function conditionKind(c) {
  if (c.status !== 'True' && c.status !== 'False') return 'warn';
  const negative = /Pressure$|Unavailable$|^Failed$|Degraded$/.test(c.type || '');
  return (c.status === 'True') !== negative ? 'ok' : negative ? 'bad' : 'warn';
}

function evTime(e) {
  return e.lastTimestamp || (e.series && e.series.lastObservedTime) || e.eventTime || e.firstTimestamp || e.metadata.creationTimestamp;
}

function podsTable(podsRes, pods) {
  return table([
    { title: 'Name', cell: (p) => h('a', { href: detailHref(podsRes, p.metadata.namespace, p.metadata.name) }, p.metadata.name) },
    { title: 'Ready', cell: podReady },
    { title: 'Status', cell: (p) => { const s = podStatus(p); return badge(s, s === 'Running' || s === 'Completed' ? 'ok' : s === 'Pending' ? 'warn' : s === 'Terminating' ? '' : 'bad'); } },
    { title: 'Restarts', class: 'num', cell: restarts },
    { title: 'Node', cell: (p) => (p.spec || {}).nodeName || '' },
    { title: 'IP', cell: (p) => (p.status || {}).podIP || '' },
    { title: 'Age', cell: (p) => age(p.metadata.creationTimestamp) },
  ], pods, { empty: 'No pods match the selector.' });
}

function containerState(cs) {
  const st = (cs && cs.state) || {};
  if (st.running) return badge(`Running ${age(st.running.startedAt)}`, 'ok');
  if (st.waiting) return badge(`Waiting: ${st.waiting.reason || ''}`, 'warn');
  if (st.terminated) return badge(`Terminated: ${st.terminated.reason || ''} (exit ${st.terminated.exitCode})`, st.terminated.exitCode === 0 ? '' : 'bad');
  return badge('Unknown', '');
}

function kindSummary(res, o, disc) {
  const spec = o.spec || {};
  const s = o.status || {};
  if (res.group === '' && res.kind === 'Pod') {
    const statuses = new Map([...(s.initContainerStatuses || []), ...(s.containerStatuses || [])].map((c) => [c.name, c]));
    const nodes = disc.get('', 'nodes');
    return [
      section('Pod', facts([
        ['Status', podStatus(o)],
        ['Node', spec.nodeName ? (nodes ? h('a', { href: detailHref(nodes, '', spec.nodeName) }, spec.nodeName) : spec.nodeName) : 'not scheduled'],
        ['Pod IP', s.podIP],
        ['Host IP', s.hostIP],
        ['QoS class', s.qosClass],
        ['Service account', spec.serviceAccountName],
        ['Restart policy', spec.restartPolicy],
        ['Message', s.message],
      ])),
      section('Containers', table([
        { title: 'Name', cell: (c) => c.name + (c.init ? ' (init)' : '') },
        { title: 'Image', class: 'wrap', cell: (c) => c.image || '' },
        { title: 'State', cell: (c) => containerState(statuses.get(c.name)) },
        { title: 'Ready', cell: (c) => { const r = (statuses.get(c.name) || {}).ready; return badge(r ? 'yes' : 'no', r ? 'ok' : 'warn'); } },
        { title: 'Restarts', class: 'num', cell: (c) => String((statuses.get(c.name) || {}).restartCount || 0) },
        { title: 'Ports', cell: (c) => (c.ports || []).map((p) => `${p.containerPort}/${p.protocol || 'TCP'}`).join(', ') },
      ], [...(spec.initContainers || []).map((c) => ({ ...c, init: true })), ...(spec.containers || [])])),
    ];
  }
  if (WORKLOAD_KINDS.has(res.kind) && res.group) {
    const [ready, desired, hl] = workloadHealth(res.kind, o);
    const rows = [['Health', healthBadge(hl)], ['Ready', `${ready}/${desired}`]];
    if (res.kind === 'Job') {
      rows.push(['Succeeded', String(s.succeeded || 0)], ['Failed', String(s.failed || 0)], ['Active', String(s.active || 0)],
        ['Parallelism', String(spec.parallelism ?? 1)], ['Completions', spec.completions == null ? '' : String(spec.completions)]);
    } else if (res.kind === 'DaemonSet') {
      rows.push(['Desired', String(s.desiredNumberScheduled || 0)], ['Current', String(s.currentNumberScheduled || 0)],
        ['Up to date', String(s.updatedNumberScheduled || 0)], ['Available', String(s.numberAvailable || 0)]);
    } else {
      rows.push(['Desired', String(spec.replicas ?? 1)], ['Current', String(s.replicas || 0)],
        ['Up to date', String(s.updatedReplicas ?? '')], ['Available', String(s.availableReplicas || 0)]);
    }
    if (spec.strategy && spec.strategy.type) rows.push(['Strategy', spec.strategy.type]);
    if (spec.updateStrategy && spec.updateStrategy.type) rows.push(['Update strategy', spec.updateStrategy.type]);
    rows.push(['Selector', selectorString(spec.selector) || '']);
    const images = (((spec.template || {}).spec || {}).containers || []).map((c) => c.image).join(', ');
    rows.push(['Images', images]);
    return section(res.kind, facts(rows));
  }
  if (res.group === '' && res.kind === 'Service') {
    return section('Service', facts([
      ['Type', spec.type],
      ['Cluster IP', (spec.clusterIPs || [spec.clusterIP]).filter(Boolean).join(', ')],
      ['External IPs', (spec.externalIPs || []).join(', ')],
      ['Load balancer', ((s.loadBalancer || {}).ingress || []).map((i) => i.ip || i.hostname).join(', ')],
      ['Ports', (spec.ports || []).map((p) => `${p.name ? p.name + ' ' : ''}${p.port}/${p.protocol || 'TCP'} → ${p.targetPort ?? p.port}${p.nodePort ? ` (node ${p.nodePort})` : ''}`).join(', ')],
      ['Selector', chips(spec.selector)],
      ['Session affinity', spec.sessionAffinity],
      ['External name', spec.externalName],
    ]));
  }
  if (res.group === '' && res.kind === 'Node') {
    const info = s.nodeInfo || {};
    const resources = Object.keys({ ...(s.capacity || {}), ...(s.allocatable || {}) }).sort();
    return [
      section('Node', facts([
        ['Addresses', (s.addresses || []).map((a) => `${a.type}: ${a.address}`).join(', ')],
        ['Kubelet', info.kubeletVersion],
        ['OS image', info.osImage],
        ['Kernel', info.kernelVersion],
        ['Container runtime', info.containerRuntimeVersion],
        ['Pod CIDR', (spec.podCIDRs || [spec.podCIDR]).filter(Boolean).join(', ')],
        ['Unschedulable', spec.unschedulable ? 'yes' : ''],
        ['Taints', (spec.taints || []).map((t) => `${t.key}${t.value ? '=' + t.value : ''}:${t.effect}`).join(', ')],
      ])),
      section('Resources', table([
        { title: 'Resource', cell: (r) => r },
        { title: 'Capacity', class: 'num', cell: (r) => (s.capacity || {})[r] || '' },
        { title: 'Allocatable', class: 'num', cell: (r) => (s.allocatable || {})[r] || '' },
      ], resources)),
    ];
  }
  if (res.group === '' && res.kind === 'ConfigMap') {
    const data = Object.entries(o.data || {});
    const binary = Object.keys(o.binaryData || {});
    return section('Data', data.length || binary.length ? h('dl', { class: 'facts' },
      data.map(([k, v]) => [h('dt', {}, k), h('dd', {}, h('pre', { class: 'value' }, v))]),
      binary.map((k) => [h('dt', {}, k), h('dd', { class: 'muted' }, 'binary data')])) : h('p', { class: 'empty' }, 'No data.'));
  }
  if (res.group === '' && res.kind === 'Secret') {
    const data = Object.entries(o.data || {});
    return section('Data', facts([['Type', o.type]]), data.length ? table([
      { title: 'Key', cell: ([k]) => k },
      { title: 'Size', class: 'num', cell: ([, v]) => `${Math.floor(((v || '').replace(/=+$/, '').length * 3) / 4)} bytes` },
    ], data) : h('p', { class: 'empty' }, 'No data.'));
  }
  if (o.spec !== undefined) {
    return section('Spec', h('pre', { class: 'code' }, dump(o.spec)));
  }
  return null;
}

// The YAML tab: the object as YAML, editable; Apply replaces it (PUT), with the API server's
// answer (a conflict, a validation error) shown as it comes.
function yamlEditor(root, res, ns, name) {
  const editor = h('textarea', { class: 'code yaml', id: 'yaml', spellcheck: 'false', autocomplete: 'off', 'aria-label': 'YAML' });
  const message = h('div', { id: 'yaml-message' });
  const notice = h('div', { class: 'notice hidden', id: 'yaml-changed' });
  const apply = h('button', { type: 'button', class: 'primary', id: 'apply', onclick: () => save() }, 'Apply');
  const reload = h('button', { type: 'button', id: 'reload', onclick: () => load(latest) }, 'Reload');
  replace(root,
    h('div', { class: 'toolbar' }, apply, reload, h('span', { class: 'spacer' }),
      h('span', { class: 'muted' }, res.can('update') ? 'Edit and apply: the object is replaced (PUT).' : 'This kind cannot be updated.')),
    notice, message, editor);
  apply.disabled = !res.can('update');

  let shown = null; // the resourceVersion in the editor
  let latest = null;
  let dirty = false;
  editor.addEventListener('input', () => { dirty = true; });

  function load(obj) {
    if (!obj) return;
    const copy = JSON.parse(JSON.stringify(obj));
    if (copy.metadata) delete copy.metadata.managedFields;
    editor.value = dump(copy);
    shown = obj.metadata.resourceVersion;
    dirty = false;
    notice.classList.add('hidden');
    replace(notice);
  }

  async function save() {
    apply.disabled = true;
    replace(message, h('p', { class: 'muted' }, 'Applying…'));
    try {
      const saved = await request(res.path(ns, name), {
        method: 'PUT',
        contentType: 'application/yaml',
        body: editor.value,
      });
      replace(message, h('div', { class: 'success', role: 'status' }, `Applied: ${res.kind} "${name}" is now at resourceVersion ${saved && saved.metadata ? saved.metadata.resourceVersion : '?'}.`));
      toast(`${res.kind} ${name} updated`);
      if (saved) { latest = saved; load(saved); }
    } catch (e) {
      replace(message, errorBox(e, 'Apply failed'));
    } finally {
      apply.disabled = !res.can('update');
    }
  }

  return (obj, gone) => {
    if (gone) { replace(message, errorBox({ code: 404, reason: 'NotFound', message: `${res.kind} "${name}" does not exist (any more).` })); return; }
    if (!obj) return;
    latest = obj;
    if (shown === null || (!dirty && obj.metadata.resourceVersion !== shown)) { load(obj); return; }
    if (obj.metadata.resourceVersion !== shown) {
      notice.classList.remove('hidden');
      replace(notice, `The ${res.kind.toLowerCase()} changed on the server since you opened it (resourceVersion ${obj.metadata.resourceVersion}). Applying your text will conflict: `,
        h('button', { type: 'button', onclick: () => load(latest) }, 'Load the new version'));
    }
  };
}

function scaleDialog(res, ns, name, obj) {
  const input = h('input', { type: 'number', min: '0', id: 'replicas', value: String((obj.spec || {}).replicas ?? 1) });
  dialog({
    title: `Scale ${res.kind.toLowerCase()} ${name}`,
    body: h('label', { class: 'field' }, 'Replicas ', input),
    actions: [
      { label: 'Cancel' },
      {
        label: 'Scale',
        kind: 'primary',
        run: async () => {
          const n = Number(input.value);
          if (!Number.isInteger(n) || n < 0) throw new Error('Replicas must be a whole number, 0 or more.');
          await request(`${res.path(ns, name)}/scale`, {
            method: 'PATCH',
            contentType: 'application/merge-patch+json',
            body: JSON.stringify({ spec: { replicas: n } }),
          });
          toast(`${res.kind} ${name} scaled to ${n}`);
        },
      },
    ],
  });
}

function deleteDialog(res, ns, name, ctx) {
  dialog({
    title: `Delete ${res.kind.toLowerCase()} ${name}?`,
    body: h('p', {}, `${res.kind} "${name}"${res.namespaced ? ` in namespace "${ns}"` : ''} will be deleted, and what it owns with it. This cannot be undone.`),
    actions: [
      { label: 'Cancel' },
      {
        label: 'Delete',
        kind: 'danger',
        run: async () => {
          await request(res.path(ns, name), {
            method: 'DELETE',
            contentType: 'application/json',
            body: JSON.stringify({ kind: 'DeleteOptions', apiVersion: 'v1', propagationPolicy: 'Background' }),
          });
          toast(`${res.kind} ${name} deleted`);
          ctx.go(`#/r/${res.group || 'core'}/${res.name}`);
        },
      },
    ],
  });
}

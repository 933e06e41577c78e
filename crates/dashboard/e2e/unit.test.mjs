// Unit tests of the UI's pure parts (node --test): YAML output that YAML readers take back
// unchanged, kubectl-style durations and statuses, label selectors, workload health.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import yaml from 'js-yaml';

import { dump } from '../ui/js/yaml.js';
import { duration, label } from '../ui/js/dom.js';
import { withQuery } from '../ui/js/api.js';
import { podStatus, selectorString } from '../ui/js/detail.js';
import { workloadHealth } from '../ui/js/overview.js';

const roundTrip = (v) => assert.deepEqual(yaml.load(dump(v)), v, dump(v));

test('YAML: scalars that look like other types stay strings', () => {
  for (const s of ['true', 'False', 'yes', 'no', 'on', 'off', 'null', '~', 'y', 'N', '1', '0x1f', '1e3', '1.5', '.5', '-1',
    '0o17', '12:30', '.inf', '-.Inf', '.nan', '', ' ', ' lead', 'trail ', 'a: b', 'a #b', '#c', '- x', '[x]', '{x}', '*alias',
    '&anchor', '!tag', '%dir', '@at', '`tick', '"q"', "'q'", 'x:', '? q', '|', '>', 'a,b', 'ünïcödé', 'tab\there', 'nul\u0000',
    'app.kubernetes.io/name', 'kubectl.kubernetes.io/last-applied-configuration', '10.0.0.1', '1.2.3', 'v1.32.0', '2024-01-01',
    '2024-01-01T00:00:00Z', 'nginx:1.25', 'http://x/y?a=b&c=d', '$(VAR)', '100m', '1Gi']) {
    roundTrip({ k: s, list: [s], [s || 'empty']: 1 });
  }
});

test('YAML: multi-line strings as literal blocks', () => {
  for (const s of ['a\nb', 'a\nb\n', 'a\n\nb\n\n', 'a\n\n\n', '  indented\nfirst', 'x\n  y\n', 'trailing \nspace', 'line\r\nwin',
    'key: value\n- item\n# comment\n', '\n', '\nstarts with newline']) {
    roundTrip({ data: { f: s }, arr: [s, { inner: s }] });
  }
  assert.match(dump({ script: 'echo a\necho b\n' }), /script: \|\n {2}echo a\n {2}echo b\n/);
});

test('YAML: objects as kubectl writes them', () => {
  const obj = {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name: 'web', labels: { app: 'web' }, annotations: {}, finalizers: [] },
    spec: {
      replicas: 3,
      paused: false,
      template: { spec: { containers: [{ name: 'c', image: 'busybox', args: ['sleep', '3600'], env: [{ name: 'A', value: '1' }], ports: [] }] } },
      nested: [[1, 2], [], [{}], null],
      nothing: null,
      float: 0.25,
      big: 123456789012,
    },
  };
  roundTrip(obj);
  const text = dump(obj);
  assert.match(text, /^apiVersion: apps\/v1\nkind: Deployment\n/);
  assert.match(text, /\n {6}containers:\n {6}- name: c\n {8}image: busybox\n/);
  assert.match(text, /annotations: \{\}/);
  assert.match(text, /finalizers: \[\]/);
  roundTrip([]);
  roundTrip({});
  roundTrip('just a string');
});

test('durations read like kubectl', () => {
  assert.equal(duration(5), '5s');
  assert.equal(duration(119), '119s');
  assert.equal(duration(150), '2m30s');
  assert.equal(duration(600), '10m');
  assert.equal(duration(3 * 3600 + 60), '3h1m');
  assert.equal(duration(30 * 3600), '30h');
  assert.equal(duration(3 * 86400 + 3600), '3d1h');
  assert.equal(duration(20 * 86400), '20d');
  assert.equal(duration(3 * 365 * 86400 + 86400), '3y1d');
  assert.equal(duration(-5), '0s');
});

test('kind labels', () => {
  assert.equal(label({ kind: 'StatefulSet', name: 'statefulsets' }), 'Stateful Sets');
  assert.equal(label({ kind: 'NetworkPolicy', name: 'networkpolicies' }), 'Network Policies');
  assert.equal(label({ kind: 'Endpoints', name: 'endpoints' }), 'Endpoints');
  assert.equal(label({ kind: 'ComponentStatus', name: 'componentstatuses' }), 'Component Statuses');
  assert.equal(label({ kind: 'Pod', name: 'pods' }), 'Pods');
});

test('queries and selectors', () => {
  assert.equal(withQuery('/api/v1/pods', { labelSelector: 'a=b,c in (d)', watch: '', x: null }), '/api/v1/pods?labelSelector=a%3Db%2Cc+in+%28d%29');
  assert.equal(withQuery('/api', {}), '/api');
  assert.equal(selectorString({ matchLabels: { app: 'web', tier: 'fe' }, matchExpressions: [
    { key: 'env', operator: 'In', values: ['a', 'b'] },
    { key: 'zone', operator: 'NotIn', values: ['x'] },
    { key: 'has', operator: 'Exists' },
    { key: 'not', operator: 'DoesNotExist' },
  ] }), 'app=web,tier=fe,env in (a,b),zone notin (x),has,!not');
  assert.equal(selectorString(null), null);
});

test('pod status as kubectl shows it', () => {
  const pod = (status, extra = {}) => ({ metadata: { ...extra }, status });
  assert.equal(podStatus(pod({ phase: 'Running', containerStatuses: [{ state: { running: {} } }] })), 'Running');
  assert.equal(podStatus(pod({ phase: 'Pending', containerStatuses: [{ state: { waiting: { reason: 'ImagePullBackOff' } } }] })), 'ImagePullBackOff');
  assert.equal(podStatus(pod({ phase: 'Running', containerStatuses: [{ state: { terminated: { reason: 'Completed' } } }] })), 'Completed');
  assert.equal(podStatus(pod({ phase: 'Pending', initContainerStatuses: [{ state: { running: {} } }, { state: {} }] })), 'Init:0/2');
  assert.equal(podStatus(pod({ phase: 'Pending', initContainerStatuses: [{ state: { terminated: { exitCode: 1, reason: 'Error' } } }] })), 'Init:Error');
  assert.equal(podStatus(pod({ phase: 'Running' }, { deletionTimestamp: '2024-01-01T00:00:00Z' })), 'Terminating');
  assert.equal(podStatus(pod({ phase: 'Failed', reason: 'Evicted' })), 'Evicted');
  assert.equal(podStatus({ metadata: {} }), 'Unknown');
});

test('workload health', () => {
  const dep = (spec, status, generation = 1) => ({ metadata: { generation, creationTimestamp: new Date().toISOString() }, spec, status });
  assert.deepEqual(workloadHealth('Deployment', dep({ replicas: 3 }, { observedGeneration: 1, readyReplicas: 3, updatedReplicas: 3 })), [3, 3, 'ok']);
  assert.deepEqual(workloadHealth('Deployment', dep({ replicas: 3 }, { observedGeneration: 1, readyReplicas: 1, updatedReplicas: 3 })), [1, 3, 'progressing']);
  assert.deepEqual(workloadHealth('Deployment', dep({ replicas: 3 }, { observedGeneration: 1, readyReplicas: 1, conditions: [{ type: 'Progressing', status: 'False' }] })), [1, 3, 'failing']);
  assert.deepEqual(workloadHealth('Deployment', dep({ replicas: 0 }, {})), [0, 0, 'idle']);
  const old = dep({ replicas: 2 }, { observedGeneration: 1 });
  old.metadata.creationTimestamp = '2020-01-01T00:00:00Z';
  assert.deepEqual(workloadHealth('StatefulSet', old), [0, 2, 'failing']);
  assert.deepEqual(workloadHealth('DaemonSet', dep({}, { observedGeneration: 1, desiredNumberScheduled: 2, numberReady: 2, updatedNumberScheduled: 2 })), [2, 2, 'ok']);
  assert.deepEqual(workloadHealth('Job', dep({ completions: 3 }, { succeeded: 1, conditions: [{ type: 'Failed', status: 'True' }] })), [1, 3, 'failing']);
  assert.deepEqual(workloadHealth('Job', dep({ completions: 1 }, { succeeded: 1, conditions: [{ type: 'Complete', status: 'True' }] })), [1, 1, 'ok']);
  assert.deepEqual(workloadHealth('Job', dep({}, { active: 1 })), [0, 1, 'progressing']);
});

test('logs: a followed stream that drops resumes from the last line, without repeats or stamps', async () => {
  const { followLog } = await import('../ui/js/logs.js');
  globalThis.sessionStorage ??= { getItem: () => '', setItem() {}, removeItem() {} };
  const enc = new TextEncoder();
  // What the kubelet sends: each chunk as given (lines may be split across chunks); `fail`
  // ends the body with an error, as a dropped connection does.
  const body = (chunks, fail) => {
    const rest = [...chunks];
    return new ReadableStream({
      async pull(c) {
        await new Promise((r) => setTimeout(r, 5));
        if (rest.length) c.enqueue(enc.encode(rest.shift()));
        else if (fail) c.error(new TypeError('network error'));
        else c.close();
      },
    });
  };
  const urls = [];
  const answers = [
    () => body(['2026-01-02T03:04:05.100000000Z tick 0\n2026-01-02T03:04:05.6', '00000000Z tick 1\n'], true),
    () => body(['2026-01-02T03:04:05.100000000Z tick 0\n', '2026-01-02T03:04:05.600000000Z tick 1\n',
      '2026-01-02T03:04:06.100000000Z tick 2\n', '2026-01-02T03:04:06.600000000Z tick 3']),
  ];
  const saved = globalThis.fetch;
  globalThis.fetch = async (url) => {
    urls.push(url);
    return new Response(answers[urls.length - 1](), { status: 200 });
  };
  try {
    let shown = '';
    const states = [];
    await followLog('/api/v1/namespaces/d/pods/p/log', { container: 'c', follow: 'true', tailLines: '500' }, {
      signal: new AbortController().signal,
      show: (t) => { shown += t; },
      onState: (s) => states.push(s),
      sleep: async () => {},
    });
    assert.equal(shown, 'tick 0\ntick 1\ntick 2\ntick 3');
    assert.deepEqual(states, ['following', 'reconnecting', 'following']);
    assert.equal(urls.length, 2);
    const first = new URL(urls[0], 'https://x');
    assert.equal(first.searchParams.get('tailLines'), '500');
    assert.equal(first.searchParams.get('timestamps'), 'true');
    const second = new URL(urls[1], 'https://x');
    assert.equal(second.searchParams.get('sinceTime'), '2026-01-02T03:04:05Z');
    assert.equal(second.searchParams.get('tailLines'), null);
    assert.equal(second.searchParams.get('container'), 'c');
  } finally {
    globalThis.fetch = saved;
  }
});

test('logs: the user\'s timestamps are kept, and an API error ends the stream', async () => {
  const { followLog } = await import('../ui/js/logs.js');
  globalThis.sessionStorage ??= { getItem: () => '', setItem() {}, removeItem() {} };
  const saved = globalThis.fetch;
  let calls = 0;
  globalThis.fetch = async () => {
    calls += 1;
    if (calls === 1) return new Response('2026-01-02T03:04:05.100000000Z a\n', { status: 200 });
    return new Response(JSON.stringify({ kind: 'Status', code: 400, reason: 'BadRequest', message: 'container c is terminated' }), { status: 400 });
  };
  try {
    let shown = '';
    await followLog('/p/log', { container: 'c', timestamps: 'true' }, {
      signal: new AbortController().signal, show: (t) => { shown += t; }, sleep: async () => {},
    });
    assert.equal(shown, '2026-01-02T03:04:05.100000000Z a\n');
    await assert.rejects(
      followLog('/p/log', { container: 'c' }, { signal: new AbortController().signal, show: () => {}, sleep: async () => {} }),
      /container c is terminated/,
    );
  } finally {
    globalThis.fetch = saved;
  }
});

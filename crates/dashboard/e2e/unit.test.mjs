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

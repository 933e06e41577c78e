// A pod's logs: pick a container, follow the stream (`?follow=true`) as it is written.

import { request, stream, withQuery } from './api.js';
import { errorBox, h, replace } from './dom.js';

// Keep at most this much text in the page.
const MAX_CHARS = 2_000_000;

export function renderLogs(root, { res, ns, name, pod }) {
  const spec = (pod && pod.spec) || {};
  const containers = [
    ...(spec.initContainers || []).map((c) => [c.name, `${c.name} (init)`]),
    ...(spec.containers || []).map((c) => [c.name, c.name]),
    ...(spec.ephemeralContainers || []).map((c) => [c.name, `${c.name} (ephemeral)`]),
  ];
  const first = (spec.containers || [])[0];
  const picker = h('select', { id: 'log-container', 'aria-label': 'Container' },
    containers.map(([v, t]) => h('option', { value: v }, t)));
  if (first) picker.value = first.name;
  const follow = h('input', { type: 'checkbox', id: 'log-follow', checked: true });
  const previous = h('input', { type: 'checkbox', id: 'log-previous' });
  const timestamps = h('input', { type: 'checkbox', id: 'log-timestamps' });
  const tail = h('select', { id: 'log-tail', 'aria-label': 'Lines' },
    ['100', '500', '2000', 'all'].map((n) => h('option', { value: n }, n === 'all' ? 'all lines' : `last ${n} lines`)));
  tail.value = '500';
  const status = h('span', { class: 'log-status muted', id: 'log-status' });
  const out = h('pre', { class: 'logs', id: 'log-output', tabindex: '0' });
  const problem = h('div', { id: 'log-error' });
  replace(root,
    h('div', { class: 'toolbar' },
      h('label', {}, 'Container ', picker),
      h('label', {}, tail),
      h('label', {}, follow, ' Follow'),
      h('label', {}, previous, ' Previous'),
      h('label', {}, timestamps, ' Timestamps'),
      h('span', { class: 'spacer' }),
      status),
    problem,
    out);

  let controller = null;
  const start = async () => {
    if (controller) controller.abort();
    controller = new AbortController();
    const mine = controller;
    replace(out);
    replace(problem);
    if (!picker.value) { replace(status, 'This pod has no containers.'); return; }
    const query = {
      container: picker.value,
      follow: follow.checked ? 'true' : '',
      previous: previous.checked ? 'true' : '',
      timestamps: timestamps.checked ? 'true' : '',
      tailLines: tail.value === 'all' ? '' : tail.value,
    };
    const path = withQuery(`${res.path(ns, name)}/log`, query);
    replace(status, follow.checked ? 'Following…' : 'Loading…');
    let stick = true;
    let shown = 0;
    out.onscroll = () => { stick = out.scrollTop + out.clientHeight >= out.scrollHeight - 8; };
    try {
      if (follow.checked) {
        await stream(path, {
          accept: '*/*',
          signal: mine.signal,
          onChunk: (text) => {
            out.appendChild(document.createTextNode(text));
            shown += text.length;
            if (shown > MAX_CHARS) {
              out.textContent = out.textContent.slice(-MAX_CHARS / 2);
              shown = out.textContent.length;
            }
            if (stick) out.scrollTop = out.scrollHeight;
          },
        });
        if (!mine.signal.aborted) replace(status, 'The log stream ended.');
      } else {
        const resp = await request(path, { accept: '*/*', signal: mine.signal, raw: true });
        out.textContent = await resp.text();
        out.scrollTop = out.scrollHeight;
        replace(status, `${out.textContent.split('\n').filter(Boolean).length} lines`);
      }
    } catch (e) {
      if (mine.signal.aborted || (e && e.name === 'AbortError')) return;
      replace(status);
      replace(problem, errorBox(e, 'Cannot read the logs'));
    }
  };
  for (const el of [picker, follow, previous, timestamps, tail]) el.addEventListener('change', start);
  start();
  return () => { if (controller) controller.abort(); };
}

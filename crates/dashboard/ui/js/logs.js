// A pod's logs: pick a container, follow the stream (`?follow=true`) as it is written.

import { ApiError, request, sleep as wait, stream, withQuery } from './api.js';
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
    const show = (text) => {
      out.appendChild(document.createTextNode(text));
      shown += text.length;
      if (shown > MAX_CHARS) {
        out.textContent = out.textContent.slice(-MAX_CHARS / 2);
        shown = out.textContent.length;
      }
      if (stick) out.scrollTop = out.scrollHeight;
    };
    try {
      if (follow.checked) {
        await followLog(`${res.path(ns, name)}/log`, query, {
          signal: mine.signal,
          show,
          onState: (state) => {
            if (state === 'following') replace(status, 'Following…');
            else if (state === 'reconnecting') replace(status, 'The connection was lost; reconnecting…');
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

// A line's timestamp (the kubelet's fixed-width RFC 3339, nine fractional digits), or null.
const STAMP = /^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d) /;

// Follows a container's log, calling show(text) with each piece of new output. The stream is
// asked for timestamps (shown only if the user asked for them): when the connection drops —
// browsers abort open requests when the machine's network changes, as it does whenever a
// pod's interface comes up — it is opened again from the last line's second, and the lines
// already shown are skipped, so nothing is lost or repeated. Resolves when the server ends the
// stream; rejects with the API server's error.
export async function followLog(path, query, { signal, show, onState = () => {}, sleep = wait }) {
  const userStamps = query.timestamps === 'true';
  let last = null; // the timestamp of the last line shown
  let since = null; // its whole second, as sinceTime wants it
  let backoff = 1000;
  for (;;) {
    const q = { ...query, follow: 'true', timestamps: 'true' };
    if (since !== null) {
      // Resuming: from the last line's second (sinceTime has whole seconds); what was shown
      // is skipped below. tailLines would cut what came while the stream was down.
      q.sinceTime = since;
      delete q.tailLines;
    }
    let partial = '';
    const lines = (text) => {
      partial += text;
      let i;
      let shownNow = '';
      while ((i = partial.indexOf('\n')) >= 0) {
        const line = partial.slice(0, i + 1);
        partial = partial.slice(i + 1);
        const m = STAMP.exec(line);
        if (m) {
          const stamp = m[0].slice(0, -1);
          if (last !== null && stamp <= last) continue;
          last = stamp;
          since = m[1] + m[3];
          shownNow += userStamps ? line : line.slice(m[0].length);
        } else {
          shownNow += line;
        }
      }
      if (shownNow) show(shownNow);
    };
    try {
      await stream(withQuery(path, q), {
        accept: '*/*',
        signal,
        onOpen: () => { backoff = 1000; onState('following'); },
        onChunk: lines,
      });
      // A last line without its newline (the container ended mid-line).
      if (partial) {
        const m = STAMP.exec(partial);
        show(m && !userStamps ? partial.slice(m[0].length) : partial);
      }
      return;
    } catch (e) {
      if (signal.aborted || (e && e.name === 'AbortError')) throw e;
      // The API server's answer (the container is gone, the pod was deleted) ends it.
      if (e instanceof ApiError && e.code !== 0) throw e;
      onState('reconnecting');
      await sleep(backoff, signal);
      if (signal.aborted) throw new DOMException('aborted', 'AbortError');
      backoff = Math.min(backoff * 2, 30000);
    }
  }
}

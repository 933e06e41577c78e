// Small DOM helpers: element building, times, dialogs, messages.

// h('div', {class: 'x', onclick: f}, 'text', child, [more]) builds an element. Text is always
// set as text, never parsed as HTML.
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else if (k === 'text') el.textContent = v;
    else if (k === 'value') el.value = v;
    else if (k === 'checked') el.checked = !!v;
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else if (c instanceof Node) el.appendChild(c);
    else el.appendChild(document.createTextNode(String(c)));
  }
}

export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
}

export function replace(el, ...children) {
  clear(el);
  append(el, children);
  return el;
}

// kubectl's short durations: 45s, 3m20s, 5h, 2d3h, 400d, 3y.
export function duration(seconds) {
  const s = Math.max(0, Math.floor(seconds));
  const m = Math.floor(s / 60);
  const hr = Math.floor(m / 60);
  const d = Math.floor(hr / 24);
  const y = Math.floor(d / 365);
  if (s < 120) return `${s}s`;
  if (m < 10) return s % 60 ? `${m}m${s % 60}s` : `${m}m`;
  if (m < 180) return `${m}m`;
  if (hr < 8) return m % 60 ? `${hr}h${m % 60}m` : `${hr}h`;
  if (hr < 48) return `${hr}h`;
  if (hr < 24 * 8) return hr % 24 ? `${d}d${hr % 24}h` : `${d}d`;
  if (d < 365 * 2) return `${d}d`;
  if (y < 8) return d % 365 ? `${y}y${d % 365}d` : `${y}y`;
  return `${y}y`;
}

// The age of a timestamp ('' when there is none).
export function age(ts) {
  if (!ts) return '';
  const t = Date.parse(ts);
  if (Number.isNaN(t)) return '';
  return duration((Date.now() - t) / 1000);
}

// A message box for an error, showing the API server's Status message.
export function errorBox(err, prefix) {
  const code = err && err.code ? ` (${err.code}${err.reason ? ' ' + err.reason : ''})` : '';
  const msg = (err && err.message) || String(err);
  return h('div', { class: 'error', role: 'alert' }, prefix ? `${prefix}: ` : '', msg, h('span', { class: 'code' }, code));
}

export function badge(text, kind) {
  return h('span', { class: `badge ${kind || ''}` }, text);
}

let toastArea = null;

// Remove the messages still showing (signing out).
export function clearToasts() {
  if (toastArea) clear(toastArea);
}
// A short-lived message at the bottom of the page.
export function toast(message, kind = 'info') {
  if (!toastArea) {
    toastArea = h('div', { class: 'toasts', 'aria-live': 'polite' });
    document.body.appendChild(toastArea);
  }
  const t = h('div', { class: `toast ${kind}`, role: kind === 'error' ? 'alert' : 'status' }, message);
  toastArea.appendChild(t);
  setTimeout(() => t.remove(), kind === 'error' ? 10000 : 4000);
}

// A modal dialog. `body` is an element; `actions` a list of {label, kind, run}: run may be
// async and return false to keep the dialog open; errors it throws are shown in the dialog.
export function dialog({ title, body, actions }) {
  return new Promise((resolve) => {
    const message = h('div', { class: 'dialog-message' });
    const buttons = actions.map((a) => h('button', {
      class: a.kind || '',
      type: 'button',
      onclick: async () => {
        buttons.forEach((b) => { b.disabled = true; });
        replace(message);
        try {
          const keep = a.run ? await a.run() : undefined;
          if (keep === false) { buttons.forEach((b) => { b.disabled = false; }); return; }
          close(a.label);
        } catch (e) {
          replace(message, errorBox(e));
          buttons.forEach((b) => { b.disabled = false; });
        }
      },
    }, a.label));
    const box = h('div', { class: 'dialog', role: 'dialog', 'aria-modal': 'true', 'aria-label': title },
      h('h2', {}, title), body, message, h('div', { class: 'dialog-actions' }, buttons));
    const backdrop = h('div', { class: 'backdrop' }, box);
    const onKey = (e) => { if (e.key === 'Escape') close(null); };
    function close(result) {
      document.removeEventListener('keydown', onKey);
      backdrop.remove();
      resolve(result);
    }
    document.addEventListener('keydown', onKey);
    document.body.appendChild(backdrop);
    const focus = box.querySelector('input, textarea, select') || buttons[buttons.length - 1];
    if (focus) focus.focus();
  });
}

// A table: columns are {title, cell(item) -> node|string, class}.
export function table(columns, items, { empty = 'Nothing here.', rowClass } = {}) {
  if (!items.length) return h('p', { class: 'empty' }, empty);
  return h('table', { class: 'grid' },
    h('thead', {}, h('tr', {}, columns.map((c) => h('th', { class: c.class || '' }, c.title)))),
    h('tbody', {}, items.map((it) => h('tr', { class: rowClass ? rowClass(it) : '' },
      columns.map((c) => h('td', { class: c.class || '' }, c.cell(it)))))));
}

export function section(title, ...children) {
  return h('section', { class: 'card' }, h('h2', {}, title), ...children);
}

// A definition list from [label, value] pairs (values left out when empty).
export function facts(pairs) {
  return h('dl', { class: 'facts' }, pairs
    .filter(([, v]) => v !== undefined && v !== null && v !== '')
    .map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]));
}

export function chips(map) {
  const entries = Object.entries(map || {});
  if (!entries.length) return h('span', { class: 'muted' }, 'none');
  return h('span', { class: 'chips' }, entries.map(([k, v]) => h('span', { class: 'chip' }, v === '' ? k : `${k}=${v}`)));
}

// "StatefulSet" with plural "statefulsets" reads "Stateful Sets".
export function label(r) {
  const lower = r.kind.toLowerCase();
  let p = 0;
  while (p < lower.length && p < r.name.length && lower[p] === r.name[p]) p += 1;
  const plural = r.kind.slice(0, p) + r.name.slice(p);
  return plural.replace(/([a-z0-9])([A-Z])/g, '$1 $2');
}

// Talking to the API server through the dashboard: every call carries the token the user
// signed in with, so the API server's RBAC decides what works.

const TOKEN_KEY = 'capstan.token';
const USER_KEY = 'capstan.user';

export const TABLE_ACCEPT = 'application/json;as=Table;v=v1;g=meta.k8s.io, application/json';

export const session = {
  get token() { return sessionStorage.getItem(TOKEN_KEY) || ''; },
  set token(t) { sessionStorage.setItem(TOKEN_KEY, t); },
  get user() { return sessionStorage.getItem(USER_KEY) || ''; },
  set user(u) { sessionStorage.setItem(USER_KEY, u); },
  clear() {
    sessionStorage.removeItem(TOKEN_KEY);
    sessionStorage.removeItem(USER_KEY);
  },
};

// An API failure, carrying the Status the API server answered with.
export class ApiError extends Error {
  constructor(code, reason, message, details) {
    super(message || reason || `HTTP ${code}`);
    this.name = 'ApiError';
    this.code = code;
    this.reason = reason || '';
    this.details = details || null;
  }
}

let unauthorized = () => {};
// What to do when the API server answers 401 (the token is wrong or expired).
export function onUnauthorized(f) { unauthorized = f; }

function headers(extra) {
  const h = { ...extra };
  const t = session.token;
  if (t) h.Authorization = `Bearer ${t}`;
  return h;
}

async function errorFrom(resp) {
  let text = '';
  try { text = await resp.text(); } catch { /* the body is lost: use the status line */ }
  let status = null;
  try { status = JSON.parse(text); } catch { /* not JSON */ }
  if (status && typeof status === 'object' && status.kind === 'Status') {
    return new ApiError(resp.status, status.reason, status.message || text, status.details);
  }
  const message = text.trim() || `${resp.status} ${resp.statusText}`.trim();
  return new ApiError(resp.status, resp.statusText, message.slice(0, 2000));
}

// One API call. Resolves to the parsed JSON (or the Response itself with raw: true); rejects
// with an ApiError holding the server's Status message.
export async function request(path, opts = {}) {
  const { method = 'GET', body, contentType, accept = 'application/json', signal, raw = false } = opts;
  const extra = { Accept: accept };
  if (contentType) extra['Content-Type'] = contentType;
  let resp;
  for (let attempt = 0; ; attempt += 1) {
    try {
      resp = await fetch(path, { method, headers: headers(extra), body, signal, cache: 'no-store' });
      break;
    } catch (e) {
      if (e && e.name === 'AbortError') throw e;
      // A read is tried again once: browsers drop requests in flight when the machine's
      // network changes, though the dashboard is still there.
      if (method === 'GET' && attempt === 0) {
        await sleep(300, signal);
        continue;
      }
      throw new ApiError(0, 'NetworkError', `cannot reach the dashboard server: ${e && e.message}`);
    }
  }
  if (!resp.ok) {
    const err = await errorFrom(resp);
    if (resp.status === 401) unauthorized(err);
    throw err;
  }
  if (raw) return resp;
  const text = await resp.text();
  if (!text) return null;
  try {
    return JSON.parse(text);
  } catch {
    throw new ApiError(resp.status, 'BadResponse', `the answer is not JSON: ${text.slice(0, 200)}`);
  }
}

export function get(path, opts) { return request(path, opts); }

// `path` with the query parameters in `query` (empty values left out).
export function withQuery(path, query) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(query || {})) {
    if (v !== undefined && v !== null && v !== '') q.set(k, v);
  }
  const s = q.toString();
  return s ? `${path}?${s}` : path;
}

// Read a streaming answer line by line (watch events, log lines), calling onLine for each;
// resolves when the server ends the stream. onChunk, if given, gets the raw text instead;
// onOpen gets the response once its headers are in.
export async function stream(path, { accept = 'application/json', signal, onLine, onChunk, onOpen }) {
  const resp = await request(path, { accept, signal, raw: true });
  if (onOpen) onOpen(resp);
  if (!resp.body) return;
  const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      if (onChunk) { onChunk(value); continue; }
      buf += value;
      let i;
      while ((i = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, i);
        buf = buf.slice(i + 1);
        if (line.trim()) onLine(line);
      }
    }
    if (buf.trim() && onLine) onLine(buf);
  } finally {
    reader.cancel().catch(() => {});
  }
}

// Resolves after `ms`, or at once when `signal` aborts.
export const sleep = (ms, signal) => new Promise((resolve) => {
  const t = setTimeout(resolve, ms);
  if (signal) signal.addEventListener('abort', () => { clearTimeout(t); resolve(); }, { once: true });
});

class Gone extends Error {}

// Whether the browser multiplexes requests to this origin (HTTP/2 or 3): then many watches
// can run at once; over HTTP/1.1 the browser allows only six connections, so pages with many
// collections poll instead.
export function multiplexed() {
  const nav = performance.getEntriesByType('navigation')[0];
  return !!nav && (nav.nextHopProtocol === 'h2' || nav.nextHopProtocol === 'h3');
}

// A collection kept up to date: list, then watch from the list's resourceVersion (relisting
// when the server says the version is too old, re-watching when a watch ends). In table mode
// the items are the rows of the server's Table (kubectl's columns); otherwise the objects.
//   onChange(live) after every batch of changes; onError(err) when a list or watch fails.
export class Live {
  constructor({ path, query = {}, table = false, poll = false, onChange, onError }) {
    this.path = path;
    this.query = query;
    this.table = table;
    this.poll = poll;
    this.onChange = onChange || (() => {});
    this.onError = onError || (() => {});
    this.items = new Map();
    this.columns = [];
    this.loaded = false;
    this.error = null;
    this.controller = new AbortController();
    this.pending = null;
  }

  get accept() { return this.table ? TABLE_ACCEPT : 'application/json'; }

  start() { this.run(); return this; }

  stop() { this.controller.abort(); if (this.pending) clearTimeout(this.pending); }

  get stopped() { return this.controller.signal.aborted; }

  list() {
    const all = [...this.items.values()];
    return all.sort((a, b) => keyOf(this.table, a).localeCompare(keyOf(this.table, b)));
  }

  changed() {
    if (this.pending || this.stopped) return;
    this.pending = setTimeout(() => { this.pending = null; if (!this.stopped) this.onChange(this); }, 30);
  }

  reset(list) {
    this.items.clear();
    if (this.table) {
      this.columns = list.columnDefinitions || [];
      for (const row of list.rows || []) this.items.set(uidOf(true, row), row);
    } else {
      for (const obj of list.items || []) this.items.set(uidOf(false, obj), obj);
    }
    this.loaded = true;
    this.error = null;
  }

  apply(ev) {
    const things = this.table ? (ev.object && ev.object.rows) || [] : [ev.object];
    for (const t of things) {
      if (!t) continue;
      const uid = uidOf(this.table, t);
      if (ev.type === 'DELETED') this.items.delete(uid);
      else this.items.set(uid, t);
    }
  }

  async run() {
    const signal = this.controller.signal;
    let rv = null;
    let backoff = 1000;
    while (!signal.aborted) {
      try {
        if (rv === null || this.poll) {
          const list = await request(withQuery(this.path, this.query), { accept: this.accept, signal });
          this.reset(list || {});
          rv = (list && list.metadata && list.metadata.resourceVersion) || '';
          this.onChange(this);
          backoff = 1000;
          if (this.poll) { await sleep(5000, signal); continue; }
        }
        const q = { ...this.query, watch: '1', allowWatchBookmarks: 'true', resourceVersion: rv };
        await stream(withQuery(this.path, q), {
          accept: this.accept,
          signal,
          // Watching again after a failure (the browser saw the network change, the server
          // restarted): the collection is live again.
          onOpen: () => { if (this.error) { this.error = null; this.onChange(this); } },
          onLine: (line) => {
            let ev;
            try { ev = JSON.parse(line); } catch { return; }
            if (!ev || typeof ev !== 'object') return;
            const md = (ev.object && ev.object.metadata) || {};
            if (ev.type === 'ERROR') {
              const s = ev.object || {};
              if (s.code === 410) throw new Gone();
              throw new ApiError(s.code || 500, s.reason, s.message || 'the watch failed');
            }
            if (md.resourceVersion) rv = md.resourceVersion;
            if (ev.type === 'BOOKMARK') return;
            this.apply(ev);
            this.changed();
          },
        });
        backoff = 1000;
      } catch (e) {
        if (signal.aborted || (e && e.name === 'AbortError')) return;
        if (e instanceof Gone || (e && e.code === 410)) { rv = null; continue; }
        if (e && e.code === 401) return;
        this.error = e instanceof ApiError
          ? e
          : new ApiError(0, 'NetworkError', `the connection was lost (${e && e.message}); reconnecting`);
        this.onError(e, this);
        this.onChange(this);
        await sleep(backoff, signal);
        backoff = Math.min(backoff * 2, 30000);
      }
    }
  }
}

function uidOf(table, t) {
  const md = (table ? t.object && t.object.metadata : t.metadata) || {};
  if (md.uid) return md.uid;
  if (table) return `${md.namespace || ''}/${md.name || (t.cells && t.cells[0])}`;
  return `${md.namespace || ''}/${md.name || ''}`;
}

function keyOf(table, t) {
  const md = (table ? t.object && t.object.metadata : t.metadata) || {};
  const name = md.name || (table && t.cells ? String(t.cells[0]) : '');
  return `${md.namespace || ''}/${name}`;
}

// --- discovery -----------------------------------------------------------------------------

// A kind the API serves, from discovery.
export class Resource {
  constructor(group, version, r, all) {
    this.group = group;
    this.version = version;
    this.name = r.name;
    this.kind = r.kind;
    this.namespaced = !!r.namespaced;
    this.verbs = r.verbs || [];
    this.shortNames = r.shortNames || [];
    this.scalable = all.some((x) => x.name === `${r.name}/scale`);
    this.hasLog = all.some((x) => x.name === `${r.name}/log`);
  }

  get groupVersion() { return this.group ? `${this.group}/${this.version}` : this.version; }

  get id() { return `${this.group || 'core'}/${this.name}`; }

  can(verb) { return this.verbs.includes(verb); }

  // The collection (ns given and namespaced) or the object's path.
  path(ns, name) {
    let p = this.group ? `/apis/${this.group}/${this.version}` : `/api/${this.version}`;
    if (this.namespaced && ns) p += `/namespaces/${encodeURIComponent(ns)}`;
    p += `/${this.name}`;
    if (name) p += `/${encodeURIComponent(name)}`;
    return p;
  }
}

// Everything the API server serves (each group's preferred version), by `group/plural`.
export async function discover() {
  const [core, groups] = await Promise.all([get('/api/v1'), get('/apis')]);
  const found = [];
  const add = (group, version, list) => {
    const all = (list && list.resources) || [];
    for (const r of all) {
      if (!r.name || r.name.includes('/')) continue;
      found.push(new Resource(group, version, r, all));
    }
  };
  add('', 'v1', core);
  const gs = ((groups && groups.groups) || []).filter((g) => g.preferredVersion);
  const lists = await Promise.allSettled(gs.map((g) => get(`/apis/${g.preferredVersion.groupVersion}`)));
  lists.forEach((res, i) => {
    if (res.status === 'fulfilled') add(gs[i].name, gs[i].preferredVersion.version, res.value);
  });
  const byId = new Map();
  for (const r of found) byId.set(r.id, r);
  return {
    resources: found,
    get(group, name) { return byId.get(`${group || 'core'}/${name}`); },
    // The resource of a kind in an apiVersion (ownerReferences, events' involvedObject).
    forKind(apiVersion, kind) {
      const group = (apiVersion || '').includes('/') ? apiVersion.split('/')[0] : '';
      return found.find((r) => r.kind === kind && r.group === group);
    },
  };
}

// Who the token belongs to (SelfSubjectReview), or '' if the API server does not say.
export async function whoAmI() {
  try {
    const review = await request('/apis/authentication.k8s.io/v1/selfsubjectreviews', {
      method: 'POST',
      contentType: 'application/json',
      body: JSON.stringify({ apiVersion: 'authentication.k8s.io/v1', kind: 'SelfSubjectReview' }),
    });
    return (review && review.status && review.status.userInfo && review.status.userInfo.username) || '';
  } catch (e) {
    if (e && e.code === 401) throw e;
    return '';
  }
}

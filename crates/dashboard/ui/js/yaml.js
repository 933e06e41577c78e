// JSON values written as YAML, for reading and editing objects. Parsing is the API server's
// job: edited text goes back with Content-Type application/yaml.

// Words a YAML reader could take for something other than a string.
const RESERVED = /^(?:~|null|true|false|yes|no|on|off|y|n|\.nan|[-+]?\.inf)$/i;
const NUMBERISH = /^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)(?:[eE][-+]?[0-9]+)?$|^0[xob][0-9a-fA-F_]+$|^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+$|^[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}/;
const PLAIN = /^[A-Za-z0-9_/.$(][A-Za-z0-9_/.$()@:=+,-]*$/;

function plainSafe(s) {
  if (!s || !PLAIN.test(s)) return false;
  if (RESERVED.test(s) || NUMBERISH.test(s)) return false;
  // ': ' and ' #' cannot occur (no spaces allowed); a trailing ':' could read as a key.
  if (s.endsWith(':') || s.includes('::')) return false;
  return true;
}

// A string scalar: plain when unambiguous, a literal block for multi-line text, else JSON
// quoting (a JSON string is a valid YAML double-quoted string).
function scalarString(s, indent) {
  if (plainSafe(s)) return s;
  if (s.includes('\n') && blockSafe(s)) {
    const chomp = s.endsWith('\n') ? (s.endsWith('\n\n') ? '+' : '') : '-';
    const body = s.endsWith('\n') ? s.slice(0, -1) : s;
    const pad = ' '.repeat(indent);
    return `|${chomp}\n` + body.split('\n').map((l) => (l ? pad + l : '')).join('\n');
  }
  return JSON.stringify(s);
}

// Literal blocks cannot hold control characters, a leading space on the first line (it would
// set the indentation) or trailing spaces that a reader might strip.
function blockSafe(s) {
  if (/[\u0000-\u0008\u000b-\u001f\u007f\u2028\u2029\ufeff]/.test(s)) return false;
  if (s.startsWith(' ') || s.startsWith('\t') || s.startsWith('\n')) return false;
  if (/[ \t]\n/.test(s) || /[ \t]$/.test(s)) return false;
  return true;
}

function key(k) {
  return plainSafe(k) ? k : JSON.stringify(k);
}

function scalar(v, indent) {
  if (v === null || v === undefined) return 'null';
  if (typeof v === 'boolean') return v ? 'true' : 'false';
  if (typeof v === 'number') return Number.isFinite(v) ? String(v) : 'null';
  return scalarString(String(v), indent);
}

function isEmptyCollection(v) {
  return (Array.isArray(v) && v.length === 0) || (v && typeof v === 'object' && !Array.isArray(v) && Object.keys(v).length === 0);
}

function lines(v, indent, out) {
  const pad = ' '.repeat(indent);
  if (Array.isArray(v)) {
    for (const item of v) {
      if (item && typeof item === 'object' && !isEmptyCollection(item)) {
        const sub = [];
        lines(item, indent + 2, sub);
        // The first line of the item goes after the dash.
        out.push(`${pad}- ${sub[0].slice(indent + 2)}`);
        for (const l of sub.slice(1)) out.push(l);
      } else {
        out.push(`${pad}- ${inline(item, indent + 2)}`);
      }
    }
    return;
  }
  for (const [k, val] of Object.entries(v)) {
    if (val && typeof val === 'object' && !isEmptyCollection(val)) {
      out.push(`${pad}${key(k)}:`);
      // Sequences under a key sit at the key's indentation, as kubectl writes them.
      lines(val, Array.isArray(val) ? indent : indent + 2, out);
    } else {
      out.push(`${pad}${key(k)}: ${inline(val, indent + 2)}`);
    }
  }
}

function inline(v, indent) {
  if (Array.isArray(v)) return '[]';
  if (v && typeof v === 'object') return '{}';
  return scalar(v, indent);
}

// `value` as a YAML document.
export function dump(value) {
  if (value === null || typeof value !== 'object' || isEmptyCollection(value)) return `${inline(value, 0)}\n`;
  const out = [];
  lines(value, 0, out);
  return `${out.join('\n')}\n`;
}

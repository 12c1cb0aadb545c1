// A small Markdown renderer for what reports contain: headings, paragraphs, lists, block
// quotes, code, tables, emphasis, links and `[n]` citations. It builds DOM nodes and sets
// text as text, so no HTML in the input is ever interpreted; links go only to http(s),
// mailto and relative addresses.

const PUNCT = '!"#$%&\'()*+,-./:;<=>?@[\\]^_`{|}~';

/** Is `url` safe to link to? http(s), mailto, or relative (no scheme). */
export function safeHref(url) {
  const u = url.trim();
  if (/^(https?:|mailto:)/i.test(u)) return u;
  if (/^[a-z][a-z0-9+.-]*:/i.test(u)) return null;
  if (/^\/\//.test(u)) return null;
  return u;
}

/**
 * Renders `md` into a DocumentFragment. Options: `cite(n)` returns the element for citation
 * `[n]` (a plain `[n]` when absent); `headingOffset` moves headings down the page's outline
 * (each keeps the class `md-hN` of its Markdown level).
 */
export function renderMarkdown(md, opts = {}) {
  const frag = document.createDocumentFragment();
  const lines = String(md).replace(/\r\n?/g, '\n').split('\n');
  renderBlocks(lines, frag, opts);
  return frag;
}

/** The plain text of inline Markdown (escapes and markup removed). */
export function inlineText(text) {
  const span = document.createElement('span');
  renderInline(text, span, {});
  return span.textContent;
}

const HEADING = /^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$/;
const FENCE = /^ {0,3}(`{3,}|~{3,})(.*)$/;
const HR = /^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$/;
const QUOTE = /^ {0,3}> ?(.*)$/;
const ITEM = /^( {0,3})([-*+]|\d{1,9}[.)])([ \t]+(.*))?$/;
const TABLE_RULE = /^ {0,3}\|?[ \t]*:?-+:?[ \t]*(\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$/;

function isBlockStart(line, next) {
  return HEADING.test(line) || FENCE.test(line) || HR.test(line) || QUOTE.test(line)
    || ITEM.test(line) || (line.includes('|') && next !== undefined && TABLE_RULE.test(next) && next.includes('-'));
}

function renderBlocks(lines, parent, opts) {
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (/^\s*$/.test(line)) {
      i += 1;
      continue;
    }
    let m;
    if ((m = line.match(FENCE))) {
      const fence = m[1];
      const body = [];
      i += 1;
      while (i < lines.length && !lines[i].trim().startsWith(fence)) {
        body.push(lines[i]);
        i += 1;
      }
      i += 1;
      const pre = document.createElement('pre');
      const code = document.createElement('code');
      code.textContent = body.join('\n');
      pre.append(code);
      parent.append(pre);
      continue;
    }
    if ((m = line.match(HEADING))) {
      const level = m[1].length;
      const el = document.createElement(`h${Math.min(6, level + (opts.headingOffset || 0))}`);
      el.className = `md-h${level}`;
      renderInline(m[2] || '', el, opts);
      parent.append(el);
      i += 1;
      continue;
    }
    if (HR.test(line)) {
      parent.append(document.createElement('hr'));
      i += 1;
      continue;
    }
    if (QUOTE.test(line)) {
      const inner = [];
      while (i < lines.length && (m = lines[i].match(QUOTE))) {
        inner.push(m[1]);
        i += 1;
      }
      const bq = document.createElement('blockquote');
      renderBlocks(inner, bq, opts);
      parent.append(bq);
      continue;
    }
    if (ITEM.test(line)) {
      i = renderList(lines, i, parent, opts);
      continue;
    }
    if (line.includes('|') && i + 1 < lines.length && TABLE_RULE.test(lines[i + 1]) && lines[i + 1].includes('-')) {
      i = renderTable(lines, i, parent, opts);
      continue;
    }
    const para = [line];
    i += 1;
    while (i < lines.length && !/^\s*$/.test(lines[i]) && !isBlockStart(lines[i], lines[i + 1])) {
      para.push(lines[i]);
      i += 1;
    }
    const p = document.createElement('p');
    renderInline(para.map((l) => l.replace(/^[ \t]+/, '')).join('\n'), p, opts);
    parent.append(p);
  }
}

function renderList(lines, start, parent, opts) {
  const first = lines[start].match(ITEM);
  const ordered = /\d/.test(first[2]);
  const list = document.createElement(ordered ? 'ol' : 'ul');
  if (ordered) {
    const n = Number.parseInt(first[2], 10);
    if (n !== 1) list.setAttribute('start', String(n));
  }
  let i = start;
  let tight = true;
  const items = [];
  while (i < lines.length) {
    const m = lines[i].match(ITEM);
    if (!m || /\d/.test(m[2]) !== ordered) break;
    const indent = m[1].length + m[2].length + 1;
    const body = [m[4] || ''];
    i += 1;
    // Continuation: indented lines, and blank lines followed by indented ones.
    while (i < lines.length) {
      const l = lines[i];
      if (/^\s*$/.test(l)) {
        const next = lines[i + 1];
        if (next !== undefined && /^\s{2,}\S/.test(next)) {
          tight = false;
          body.push('');
          i += 1;
          continue;
        }
        break;
      }
      if (/^\s{2,}\S/.test(l)) {
        body.push(l.slice(Math.min(indent, l.length - l.trimStart().length)));
        i += 1;
        continue;
      }
      if (ITEM.test(l) || isBlockStart(l, lines[i + 1])) break;
      body.push(l.trimStart()); // lazy continuation of the item's paragraph
      i += 1;
    }
    items.push(body);
    // A blank line between items makes a loose list; the list goes on if an item follows.
    if (i < lines.length && /^\s*$/.test(lines[i])) {
      const next = lines[i + 1];
      const nm = next !== undefined && next.match(ITEM);
      if (nm && /\d/.test(nm[2]) === ordered) {
        tight = false;
        i += 1;
      }
    }
  }
  for (const body of items) {
    const li = document.createElement('li');
    const simple = tight && !body.slice(1).some((l) => ITEM.test(l) || isBlockStart(l));
    if (simple) renderInline(body.join('\n'), li, opts);
    else renderBlocks(body, li, opts);
    list.append(li);
  }
  parent.append(list);
  return i;
}

function splitRow(line) {
  let s = line.trim();
  if (s.startsWith('|')) s = s.slice(1);
  if (s.endsWith('|') && !s.endsWith('\\|')) s = s.slice(0, -1);
  const cells = [];
  let cur = '';
  let code = false;
  for (let k = 0; k < s.length; k += 1) {
    const c = s[k];
    if (c === '\\' && s[k + 1] === '|') {
      cur += '|';
      k += 1;
    } else if (c === '`') {
      code = !code;
      cur += c;
    } else if (c === '|' && !code) {
      cells.push(cur.trim());
      cur = '';
    } else {
      cur += c;
    }
  }
  cells.push(cur.trim());
  return cells;
}

function renderTable(lines, start, parent, opts) {
  const head = splitRow(lines[start]);
  const align = splitRow(lines[start + 1]).map((c) => {
    const l = c.startsWith(':');
    const r = c.endsWith(':');
    return l && r ? 'center' : r ? 'right' : l ? 'left' : '';
  });
  const table = document.createElement('table');
  const thead = document.createElement('thead');
  const tr = document.createElement('tr');
  head.forEach((cell, k) => {
    const th = document.createElement('th');
    th.setAttribute('scope', 'col');
    if (align[k]) th.className = `align-${align[k]}`;
    renderInline(cell, th, opts);
    tr.append(th);
  });
  thead.append(tr);
  table.append(thead);
  const tbody = document.createElement('tbody');
  let i = start + 2;
  while (i < lines.length && lines[i].includes('|') && !/^\s*$/.test(lines[i])) {
    const row = document.createElement('tr');
    const cells = splitRow(lines[i]);
    head.forEach((_, k) => {
      const td = document.createElement('td');
      if (align[k]) td.className = `align-${align[k]}`;
      renderInline(cells[k] || '', td, opts);
      row.append(td);
    });
    tbody.append(row);
    i += 1;
  }
  table.append(tbody);
  const wrap = document.createElement('div');
  wrap.className = 'table-wrap';
  wrap.append(table);
  parent.append(wrap);
  return i;
}

// ---- Inline ----

const ENTITIES = { amp: '&', lt: '<', gt: '>', quot: '"', apos: "'", nbsp: '\u00a0' };

function isWordChar(c) {
  return c !== undefined && /[\p{L}\p{N}]/u.test(c);
}

function isSpace(c) {
  return c === undefined || /\s/.test(c);
}

/** Renders inline Markdown `text` into `parent`. */
function renderInline(text, parent, opts) {
  let buf = '';
  const flush = () => {
    if (buf) parent.append(document.createTextNode(buf));
    buf = '';
  };
  let i = 0;
  while (i < text.length) {
    const c = text[i];
    // Backslash escapes, and a backslash at a line's end: a hard break.
    if (c === '\\') {
      const n = text[i + 1];
      if (n === '\n') {
        flush();
        parent.append(document.createElement('br'));
        i += 2;
        continue;
      }
      if (n !== undefined && PUNCT.includes(n)) {
        buf += n;
        i += 2;
        continue;
      }
    }
    if (c === '\n') {
      if (buf.endsWith('  ')) {
        buf = buf.replace(/ +$/, '');
        flush();
        parent.append(document.createElement('br'));
      } else {
        buf += '\n';
      }
      i += 1;
      continue;
    }
    if (c === '`') {
      const run = text.slice(i).match(/^`+/)[0];
      const close = text.indexOf(run, i + run.length);
      if (close > 0) {
        flush();
        const code = document.createElement('code');
        let inner = text.slice(i + run.length, close).replace(/\n/g, ' ');
        if (inner.length > 2 && inner.startsWith(' ') && inner.endsWith(' ')) inner = inner.slice(1, -1);
        code.textContent = inner;
        parent.append(code);
        i = close + run.length;
        continue;
      }
      buf += run;
      i += run.length;
      continue;
    }
    if (c === '[') {
      // Citations: [3], [1, 4], and runs like [1][2].
      const cm = text.slice(i).match(/^\[(\d{1,4}(?:\s*,\s*\d{1,4})*)\](?!\()/);
      if (cm) {
        flush();
        const nums = cm[1].split(',').map((s) => Number.parseInt(s.trim(), 10));
        nums.forEach((n, k) => {
          if (k > 0) parent.append(document.createTextNode(' '));
          parent.append(opts.cite ? opts.cite(n) : document.createTextNode(`[${n}]`));
        });
        i += cm[0].length;
        continue;
      }
      const link = parseLink(text, i);
      if (link) {
        flush();
        const href = safeHref(link.url);
        if (href !== null) {
          const a = document.createElement('a');
          a.href = href;
          if (/^https?:/i.test(href)) {
            a.target = '_blank';
            a.rel = 'noopener noreferrer';
          }
          if (link.title) a.title = link.title;
          renderInline(link.label, a, { ...opts, cite: null });
          parent.append(a);
        } else {
          const span = document.createElement('span');
          renderInline(link.label, span, opts);
          parent.append(span);
        }
        i = link.end;
        continue;
      }
    }
    if (c === '<') {
      const am = text.slice(i).match(/^<(https?:\/\/[^\s<>]+)>/i);
      if (am) {
        flush();
        parent.append(externalLink(am[1]));
        i += am[0].length;
        continue;
      }
    }
    if ((c === 'h' || c === 'H') && !isWordChar(text[i - 1])) {
      const um = text.slice(i).match(/^https?:\/\/[^\s<>()]+/i);
      if (um) {
        const url = um[0].replace(/[.,;:!?'"]+$/, '');
        flush();
        parent.append(externalLink(url));
        i += url.length;
        continue;
      }
    }
    if (c === '&') {
      const em = text.slice(i).match(/^&(#\d{1,7}|#x[0-9a-f]{1,6}|[a-z]{2,6});/i);
      if (em) {
        const name = em[1];
        let ch = null;
        if (name[0] === '#') {
          const code = name[1] === 'x' || name[1] === 'X' ? Number.parseInt(name.slice(2), 16) : Number.parseInt(name.slice(1), 10);
          if (code > 0 && code <= 0x10ffff) ch = String.fromCodePoint(code);
        } else {
          ch = ENTITIES[name.toLowerCase()] || null;
        }
        if (ch) {
          buf += ch;
          i += em[0].length;
          continue;
        }
      }
    }
    if (c === '*' || c === '_' || c === '~') {
      const span = parseEmphasis(text, i);
      if (span) {
        flush();
        const el = document.createElement(span.tag);
        renderInline(span.inner, el, opts);
        parent.append(el);
        i = span.end;
        continue;
      }
    }
    buf += c;
    i += 1;
  }
  flush();
}

function externalLink(url) {
  const a = document.createElement('a');
  a.href = url;
  a.target = '_blank';
  a.rel = 'noopener noreferrer';
  a.textContent = url;
  return a;
}

/** `[label](url "title")` at `i`, brackets nested, or null. */
function parseLink(text, i) {
  let depth = 0;
  let k = i;
  for (; k < text.length; k += 1) {
    const c = text[k];
    if (c === '\\') {
      k += 1;
      continue;
    }
    if (c === '[') depth += 1;
    if (c === ']') {
      depth -= 1;
      if (depth === 0) break;
    }
  }
  if (depth !== 0 || text[k + 1] !== '(') return null;
  const rest = text.slice(k + 2);
  const m = rest.match(/^\s*(<[^>\n]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)(?:\s+"([^"]*)")?\s*\)/);
  if (!m) return null;
  let url = m[1];
  if (url.startsWith('<')) url = url.slice(1, -1);
  return { label: text.slice(i + 1, k), url, title: m[2] || '', end: k + 2 + m[0].length };
}

/** Emphasis at `i`: `**strong**`, `*em*`, `_em_` (not inside words), `~~del~~`; or null. */
function parseEmphasis(text, i) {
  const c = text[i];
  const double = text[i + 1] === c;
  if (c === '~' && !double) return null;
  const delim = double ? c + c : c;
  const after = text[i + delim.length];
  if (isSpace(after)) return null;
  if (c === '_' && isWordChar(text[i - 1])) return null;
  let k = i + delim.length;
  while (k < text.length) {
    const j = text.indexOf(delim, k);
    if (j < 0) return null;
    const before = text[j - 1];
    const next = text[j + delim.length];
    const closes = j > i + delim.length && !isSpace(before) && before !== '\\'
      && !(c === '_' && isWordChar(next)) && (double || next !== c);
    if (closes) {
      const tag = c === '~' ? 'del' : double ? 'strong' : 'em';
      return { tag, inner: text.slice(i + delim.length, j), end: j + delim.length };
    }
    k = j + delim.length;
  }
  return null;
}

// The report as the server renders it (the export's own HTML, so the page and every export
// agree), with each `[n]` a link to its source, and the sources: cited ones (title, address,
// page, the stored copy), those read but not cited, and those that could not be read, with
// the reason.

import * as api from './api.js';
import { fill, h, plural, serverHtml } from './dom.js';
import { baseUrl, shortUrl } from './run-state.js';

/**
 * The cited sources: the result's list when there is one, else the report's own sources list
 * as the server read it.
 */
export function citedSources(run) {
  const fromResult = run.result && Array.isArray(run.result.sources) ? run.result.sources : null;
  const list = fromResult && fromResult.length ? fromResult : (run.rendered ? run.rendered.sources : []);
  return list.map((s) => ({ ...s, url: s.url || '', page: s.page || pageOf(s.url) }));
}

function pageOf(url) {
  const m = /#page=(\d+)$/.exec(url || '');
  return m ? Number(m[1]) : null;
}

function fileName(url, fallback) {
  const path = baseUrl(url).split(/[?#]/)[0];
  const last = path.split('/').filter(Boolean).pop();
  return last || fallback;
}

/** A link that downloads a stored artifact (with the key, when the server wants one). */
export function artifactLink(fileId, label, name, extra) {
  const a = h('a', { href: api.artifactUrl(fileId), download: name || fileId, class: 'artifact-link', 'data-file-id': fileId }, label);
  a.addEventListener('click', (ev) => {
    if (!api.hasKey()) return;
    ev.preventDefault();
    api.openArtifact(fileId, name).catch((e) => {
      a.after(h('span', { class: 'inline-error', role: 'alert' }, ` Could not download: ${e.message}`));
    });
  });
  if (extra) a.setAttribute('aria-label', extra);
  return a;
}

/**
 * Links that download the finished report of session `id` as a standalone HTML page, a PDF
 * and a DOCX, each made once on the server and kept with the session.
 */
export function exportLinks(id) {
  const links = [['html', 'HTML'], ['pdf', 'PDF'], ['docx', 'DOCX']].map(([format, label]) => {
    const url = api.exportUrl(id, format);
    // An empty `download` keeps the file name the server gives.
    const a = h('a', {
      href: url, download: '', class: 'export-link', 'data-format': format,
      'aria-label': `Download the report as ${label}`,
    }, label);
    a.addEventListener('click', (ev) => {
      if (!api.hasKey()) return;
      ev.preventDefault();
      api.download(url, `report-${id}.${format}`).catch((e) => {
        a.parentElement.after(h('span', { class: 'inline-error', role: 'alert' }, ` Could not export: ${e.message}`));
      });
    });
    return a;
  });
  return h('span', { class: 'export-links' }, 'Export: ', links[0], ' · ', links[1], ' · ', links[2]);
}

function addressView(url) {
  if (/^https?:\/\//i.test(url)) {
    return h('a', { href: url, target: '_blank', rel: 'noopener noreferrer', class: 'source-url' }, url);
  }
  // Local files (file://) cannot be opened from a web page: the stored copy stands in.
  return h('span', { class: 'source-url', title: url.replace(/^file:\/\//, '') }, shortUrl(url));
}

/**
 * Renders the report into `el` from `run.rendered`, the server's rendering of the report as
 * it is now; as written, with why, when it could not be rendered. `citeHref(n)` is where
 * citation n leads.
 */
export function renderReport(el, run, { citeHref, live }) {
  const r = run.rendered && run.rendered.markdown === run.reportMarkdown ? run.rendered : null;
  const failed = run.renderError && run.renderError.markdown === run.reportMarkdown ? run.renderError : null;
  if (!r) {
    if (failed) {
      fill(el, h('p', { class: 'notice', role: 'status' }, `The report could not be formatted (${failed.message}); here it is as written.`),
        h('pre', { class: 'wrap report-plain' }, run.reportMarkdown));
    }
    return;
  }
  const sources = new Map(citedSources(run).map((s) => [s.n, s]));
  const previous = el.dataset.sections ? JSON.parse(el.dataset.sections) : [];
  const frag = serverHtml(r.html);
  // Under the page's title (h1) and the panel's (h2); each keeps its level as `md-hN`.
  for (const old of frag.querySelectorAll('h1, h2, h3, h4, h5, h6')) {
    const level = Number(old.tagName[1]);
    const heading = h(`h${Math.min(6, level + 2)}`, { class: `md-h${level}` });
    heading.append(...old.childNodes);
    old.replaceWith(heading);
  }
  // A wide table scrolls in its own box rather than widening the page.
  for (const table of frag.querySelectorAll('table')) {
    const wrap = h('div', { class: 'table-wrap' });
    table.replaceWith(wrap);
    wrap.append(table);
  }
  for (const a of frag.querySelectorAll('a.cite')) {
    const n = Number(a.dataset.n);
    const s = sources.get(n);
    a.setAttribute('href', citeHref(n));
    a.title = s ? s.title : `Source ${n}`;
    a.setAttribute('aria-label', `Source ${n}${s ? `: ${s.title}` : ''}`);
  }
  for (const a of frag.querySelectorAll('a:not(.cite)')) {
    if (/^https?:\/\//i.test(a.getAttribute('href') || '')) {
      a.target = '_blank';
      a.rel = 'noopener noreferrer';
    } else if (!/^mailto:/i.test(a.getAttribute('href') || '')) {
      // A local file cannot be opened from a web page: its text stays, not as a link.
      a.replaceWith(h('span', { title: a.getAttribute('href') }, ...a.childNodes));
    }
  }
  fill(el, frag);
  // Mark the sections that changed since the last render, so growth is visible.
  const now = [];
  let section = null;
  for (const child of Array.from(el.children)) {
    if (child.classList.contains('md-h2')) {
      section = { title: child.textContent, text: '', el: [child] };
      now.push(section);
    } else if (section) {
      section.text += child.textContent;
      section.el.push(child);
    }
  }
  if (live) {
    for (const s of now) {
      const before = previous.find((p) => p.title === s.title);
      if (!before || before.len !== s.text.length) s.el.forEach((e) => e.classList.add('fresh'));
    }
  }
  el.dataset.sections = JSON.stringify(now.map((s) => ({ title: s.title, len: s.text.length })));
  el.dataset.updates = String(run.reportUpdates);
}

/** Renders the sources panel into `el`. */
export function renderSources(el, run) {
  const cited = citedSources(run);
  const citedUrls = new Set(cited.map((s) => baseUrl(s.url)));
  const all = Array.from(run.sources.values());
  const read = all.filter((s) => s.status === 'read' && !citedUrls.has(s.url));
  const failed = all.filter((s) => s.status === 'failed');
  const finished = run.status !== 'running';
  const unread = finished ? all.filter((s) => s.status === 'found') : [];

  const parts = [];
  if (cited.length) {
    parts.push(h('section', { class: 'source-group', 'aria-labelledby': 'cited-title' },
      h('h3', { id: 'cited-title' }, `Cited (${cited.length})`),
      h('ol', { class: 'source-list cited', id: 'cited-sources' }, cited.map((s) => citedItem(s, run)))));
  }
  if (read.length) {
    // While the report is unwritten nothing is cited yet: these are simply read so far.
    const label = cited.length || finished ? 'Read but not cited' : 'Read so far';
    parts.push(h('section', { class: 'source-group', 'aria-labelledby': 'uncited-title' },
      h('h3', { id: 'uncited-title' }, `${label} (${read.length})`),
      h('ul', { class: 'source-list', id: 'uncited-sources' }, read.map((s) => sourceItem(s)))));
  }
  if (failed.length) {
    parts.push(h('section', { class: 'source-group', 'aria-labelledby': 'failed-title' },
      h('h3', { id: 'failed-title' }, `Could not be read (${failed.length})`),
      h('ul', { class: 'source-list', id: 'failed-sources' }, failed.map((s) => sourceItem(s)))));
  }
  if (unread.length) {
    parts.push(h('details', { class: 'source-group' },
      h('summary', {}, `Found but not read (${unread.length})`),
      h('ul', { class: 'source-list' }, unread.map((s) => sourceItem(s)))));
  }
  if (!parts.length) {
    parts.push(h('p', { class: 'muted' }, run.status === 'running'
      ? 'Sources appear here as they are found and read.'
      : 'No sources.'));
  }
  fill(el, parts);
}

function citedItem(s, run) {
  const known = (s.url && run.sources.get(baseUrl(s.url))) || {};
  const page = s.page || pageOf(s.url);
  const name = fileName(s.url, `source-${s.n}`);
  return h('li', { id: `source-${s.n}`, class: 'source', tabIndex: -1, 'data-n': String(s.n), value: String(s.n) },
    h('span', { class: 'source-n', 'aria-hidden': 'true' }, `[${s.n}]`),
    h('div', { class: 'source-body' },
      h('span', { class: 'source-title' }, s.title || known.title || baseUrl(s.url) || `Source ${s.n}`),
      page ? h('span', { class: 'source-page' }, `page ${page}`) : null,
      byline(known),
      s.url ? addressView(baseUrl(s.url)) : null,
      known.fileId
        ? h('span', { class: 'source-actions' },
          artifactLink(known.fileId, 'Download the stored copy', name))
        : null));
}

function byline(s) {
  const bits = [s.byline, s.site, s.published].filter(Boolean);
  return bits.length ? h('span', { class: 'source-byline' }, bits.join(' · ')) : null;
}

function sourceItem(s) {
  return h('li', { class: `source source-${s.status}` },
    h('div', { class: 'source-body' },
      h('span', { class: 'source-title' }, s.title || s.url),
      byline(s),
      addressView(s.url),
      s.status === 'failed' ? h('p', { class: 'source-error' }, h('strong', {}, 'Why: '), s.error || 'unknown reason') : null,
      s.status === 'read' && s.fileId
        ? h('span', { class: 'source-actions' }, artifactLink(s.fileId, 'Download the stored copy', fileName(s.url, 'source')))
        : null,
      s.status !== 'failed' && s.snippet ? h('p', { class: 'source-snippet' }, s.snippet) : null));
}

/** A line saying how far the report is. */
export function reportStatus(run) {
  const cited = citedSources(run).length;
  if (run.status === 'completed') return `Finished: ${plural(cited, 'source')} cited.`;
  if (!run.reportMarkdown) return 'The report is written once the sources are read.';
  return `Growing live: ${plural(run.reportUpdates, 'update')} so far${run.lastSection ? `, last to “${run.lastSection}”` : ''}.`;
}

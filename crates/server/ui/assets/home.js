// The home screen: start a research (question and settings) and the saved sessions, newest
// first, searchable by question.

import * as api from './api.js';
import { ago, announce, fill, h, plural } from './dom.js';
import { settingsFields } from './settings-form.js';

const STATUS_LABEL = {
  planning: 'Planning',
  awaiting_approval: 'Waiting for approval',
  running: 'Running',
  completed: 'Completed',
  failed: 'Failed',
  cancelled: 'Cancelled',
};

export function statusLabel(status) {
  return STATUS_LABEL[status] || status || 'Unknown';
}

export function statusBadge(status) {
  return h('span', { class: `badge badge-${status || 'unknown'}`, 'data-status': status || 'unknown' }, statusLabel(status));
}

/** Renders the home screen into `main`; `focus` is `sessions` to land on the list. */
export function renderHome(main, { focus, showError }) {
  const startSection = h('section', { class: 'panel start', 'aria-labelledby': 'start-title' });
  const sessionsSection = h('section', { class: 'panel sessions', 'aria-labelledby': 'sessions-title' });
  fill(main, h('div', { class: 'home' }, startSection, sessionsSection));
  renderStart(startSection, showError);
  renderSessions(sessionsSection, showError);
  if (focus === 'sessions') {
    const search = sessionsSection.querySelector('input[type=search]');
    if (search) search.focus();
  } else {
    const q = startSection.querySelector('textarea');
    if (q) q.focus({ preventScroll: true });
  }
}

function renderStart(section, showError) {
  const qId = 'question';
  const question = h('textarea', {
    id: qId, name: 'query', rows: '3', required: true, autocomplete: 'off',
    placeholder: 'e.g. How does ownership work in Rust?', 'aria-describedby': 'question-hint',
  });
  const settingsBox = h('div', { class: 'settings-fields' }, h('p', { class: 'muted' }, 'Loading the settings…'));
  const error = h('div', { class: 'form-error', id: 'start-error', role: 'alert', hidden: true });
  const submit = h('button', { type: 'submit', class: 'primary', id: 'start-button' }, 'Start research');
  const reset = h('button', { type: 'button', class: 'link-button', hidden: true }, 'Reset to defaults');
  let fields = null;

  const form = h('form', { class: 'start-form', novalidate: true, 'aria-describedby': 'start-error' },
    h('div', { class: 'field' },
      h('label', { for: qId }, 'Question'),
      question,
      h('p', { id: 'question-hint', class: 'hint' },
        'Fathom drafts a plan first. You review and approve it before anything is searched.')),
    h('details', { class: 'settings', id: 'settings' },
      h('summary', {}, 'Settings'),
      settingsBox,
      reset),
    error,
    h('div', { class: 'actions' }, submit));
  fill(section, h('h1', { id: 'start-title' }, 'New research'), form);

  const say = (msg) => {
    if (!msg) {
      error.hidden = true;
      error.textContent = '';
      return;
    }
    error.hidden = false;
    fill(error, h('strong', {}, 'Not started: '), msg);
  };

  api.researchMetadata().then((meta) => {
    fill(settingsBox);
    fields = settingsFields(settingsBox, meta.json_schema, meta.settings_defaults || {});
    reset.hidden = false;
    if (!fields.count) settingsBox.append(h('p', { class: 'muted' }, 'This server has no research settings.'));
  }).catch((e) => {
    fill(settingsBox, h('p', { class: 'form-error', role: 'alert' },
      `The settings could not be loaded: ${e.message}. Runs start with the server's defaults.`));
    if (e instanceof api.Unreachable) showError(e);
  });

  reset.addEventListener('click', () => fields && fields.reset());

  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    say(null);
    let settings = {};
    try {
      settings = fields ? fields.values() : {};
    } catch (e) {
      say(e.message);
      return;
    }
    submit.disabled = true;
    submit.textContent = 'Starting…';
    try {
      const handler = await api.startResearch(question.value, settings);
      announce('Research started. Drafting the plan.');
      location.hash = `#/run/${encodeURIComponent(handler.handler_id)}`;
    } catch (e) {
      say(e.message);
      // A refused setting: open the settings so the field is in view.
      if (e instanceof api.ApiError && /settings/i.test(e.message)) {
        document.getElementById('settings').open = true;
      }
      error.focus();
    } finally {
      submit.disabled = false;
      submit.textContent = 'Start research';
    }
  });
  error.tabIndex = -1;
}

function renderSessions(section, showError) {
  const list = h('ol', { class: 'session-list', id: 'session-list', 'aria-live': 'polite', 'aria-busy': 'true' });
  const status = h('p', { class: 'muted', id: 'sessions-status' }, 'Loading sessions…');
  const search = h('input', {
    type: 'search', id: 'session-search', placeholder: 'Search by question', autocomplete: 'off',
    'aria-controls': 'session-list', 'aria-describedby': 'sessions-status',
  });
  const more = h('button', { type: 'button', class: 'secondary', hidden: true }, 'Load more');
  const refresh = h('button', { type: 'button', class: 'link-button' }, 'Refresh');
  fill(section,
    h('div', { class: 'section-head' }, h('h2', { id: 'sessions-title' }, 'Sessions'), refresh),
    h('div', { class: 'field' }, h('label', { for: 'session-search', class: 'visually-hidden' }, 'Search sessions by question'), search),
    status, list, more);

  let items = [];
  let next = null;
  let total = null;
  let handlerStatus = new Map();

  async function load(reset) {
    list.setAttribute('aria-busy', 'true');
    try {
      if (reset) {
        items = [];
        next = null;
        // Cancelled and failed runs are told by their handler; a session only has what
        // was saved last.
        handlerStatus = new Map((await api.listHandlers().catch(() => [])).map((hd) => [hd.handler_id, hd.status]));
      }
      const page = await api.searchSessions(reset ? null : next);
      items = items.concat((page && page.items) || []);
      next = (page && page.next_page_token) || null;
      if (page && typeof page.total_size === 'number') total = page.total_size;
      draw();
    } catch (e) {
      status.textContent = `The sessions could not be loaded: ${e.message}`;
      status.className = 'form-error';
      if (e instanceof api.Unreachable) showError(e);
    } finally {
      list.setAttribute('aria-busy', 'false');
    }
  }

  /** Searching looks at every session: the rest are loaded first. */
  async function loadAll() {
    let guard = 0;
    while (next && guard < 40) {
      guard += 1;
      // eslint-disable-next-line no-await-in-loop
      await load(false);
    }
  }

  function draw() {
    const needle = search.value.trim().toLowerCase();
    const shown = items.filter((it) => !needle || String((it.data && it.data.query) || '').toLowerCase().includes(needle));
    fill(list, shown.map((it) => sessionItem(it, handlerStatus)));
    status.className = 'muted';
    if (!items.length) status.textContent = 'No sessions yet. Start a research and it is saved here.';
    else if (needle) status.textContent = `${plural(shown.length, 'session')} match “${search.value.trim()}”.`;
    else status.textContent = `${plural(total ?? items.length, 'session')}, newest first.`;
    more.hidden = !next || Boolean(needle);
  }

  let timer = null;
  search.addEventListener('input', () => {
    clearTimeout(timer);
    timer = setTimeout(async () => {
      if (search.value.trim() && next) await loadAll();
      draw();
    }, 150);
  });
  more.addEventListener('click', () => load(false));
  refresh.addEventListener('click', () => load(true));
  load(true);
}

function sessionItem(item, handlerStatus) {
  const d = item.data || {};
  const id = d.research_id || '';
  // The handler's status wins over the snapshot's: a cancelled or failed run saved no
  // final snapshot.
  let status = d.status;
  const hs = handlerStatus.get(id);
  if (hs === 'cancelled' || hs === 'failed') status = hs;
  const read = (d.sources || []).filter((s) => s.status === 'read').length;
  const cited = (d.cited_sources || []).length;
  const when = item.updated_at || item.created_at;
  // A follow-up names the session it follows up, as a link to it.
  const parent = d.parent_id
    ? h('div', { class: 'session-parent muted', 'data-parent': d.parent_id },
      'Follow-up of ',
      h('a', { href: `#/run/${encodeURIComponent(d.parent_id)}` }, `“${d.parent_query || d.parent_id}”`))
    : null;
  return h('li', { class: 'session', 'data-id': id },
    h('a', { href: `#/run/${encodeURIComponent(id)}`, class: 'session-link' },
      h('span', { class: 'session-query' }, d.query || '(no question)')),
    parent,
    h('div', { class: 'session-meta' },
      statusBadge(status),
      h('span', {}, [plural(read, 'source'), ' read', cited ? `, ${cited} cited` : '']),
      when ? h('time', { datetime: when }, ago(when)) : null));
}

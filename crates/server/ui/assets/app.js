// Fathom's web UI: routes (`#/`, `#/sessions`, `#/run/{id}`, `#/run/{id}/source/{n}`), the
// API key form, and the notice shown while the server cannot be reached.

import * as api from './api.js';
import { fill, h } from './dom.js';
import { renderHome } from './home.js';
import { mountRun } from './run-view.js';

const main = document.getElementById('main');
const banner = document.getElementById('banner');
let view = null; // the mounted run view, if any
let askingKey = false;

function parseRoute(hash) {
  const path = hash.replace(/^#/, '');
  let m;
  if ((m = path.match(/^\/run\/([^/]+)\/source\/(\d+)$/))) return { name: 'run', id: decodeURIComponent(m[1]), source: Number(m[2]) };
  if ((m = path.match(/^\/run\/([^/]+)\/?$/))) return { name: 'run', id: decodeURIComponent(m[1]) };
  if (path === '/sessions') return { name: 'home', focus: 'sessions' };
  return { name: 'home' };
}

function route(force) {
  const hash = location.hash;
  // In-page anchors (the skip link) are not routes.
  if (hash && !hash.startsWith('#/')) return;
  if (askingKey && !force) return;
  const r = parseRoute(hash);
  if (r.name === 'run' && view && view.id === r.id && !force) {
    if (r.source) view.focusSource(r.source);
    return;
  }
  if (view) view.destroy();
  view = null;
  document.title = 'Fathom';
  markNav(r);
  if (r.name === 'run') {
    view = mountRun(main, r.id);
    if (r.source) view.focusSource(r.source);
  } else {
    renderHome(main, { focus: r.focus, showError });
  }
}

function markNav(r) {
  for (const a of document.querySelectorAll('.top nav a')) {
    const here = (a.getAttribute('href') === '#/sessions') === (r.focus === 'sessions') && r.name === 'home';
    if (here) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
}

// ---- The server is down ----

let polling = null;

function showError(e) {
  if (e instanceof api.Unreachable) down();
}

function down() {
  banner.hidden = false;
  fill(banner, h('strong', {}, 'The server cannot be reached. '),
    `Fathom at ${location.origin} does not answer. Is \`fathom serve\` running? Retrying every few seconds…`,
    h('button', { type: 'button', class: 'secondary small', on: { click: probe } }, 'Retry now'));
  if (!polling) polling = setInterval(probe, 2000);
}

async function probe() {
  if (await api.healthy()) up();
}

function up() {
  banner.hidden = true;
  clearInterval(polling);
  polling = null;
  // Start over what could not load; a run view carries on from its last event.
  if (view) view.reconnect();
  else route(true);
}

// ---- The API key ----

function askKey(detail) {
  if (askingKey) return;
  askingKey = true;
  if (view) view.destroy();
  view = null;
  const input = h('input', { type: 'password', id: 'api-key', autocomplete: 'current-password', required: true, 'aria-describedby': 'api-key-hint api-key-error' });
  const error = h('p', { id: 'api-key-error', class: 'form-error', role: 'alert' }, api.hasKey() ? `The key was refused: ${detail}` : '');
  error.hidden = !api.hasKey();
  const form = h('form', { class: 'panel key-form', id: 'key-form', novalidate: true },
    h('h1', {}, 'This server needs an API key'),
    h('p', { id: 'api-key-hint', class: 'hint' },
      'It was started with --api-key. Enter that key; this browser keeps it, so you are asked once.'),
    h('div', { class: 'field' }, h('label', { for: 'api-key' }, 'API key'), input),
    error,
    h('div', { class: 'actions' }, h('button', { type: 'submit', class: 'primary' }, 'Use this key')));
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    if (!input.value.trim()) {
      error.hidden = false;
      error.textContent = 'Enter the key the server was started with.';
      input.focus();
      return;
    }
    api.setKey(input.value);
    askingKey = false;
    route(true);
  });
  fill(main, form);
  input.focus();
}

api.onConnection((state, detail) => {
  if (state === 'down') down();
  else if (state === 'up' && !banner.hidden) up();
  else if (state === 'key') askKey(detail);
});

// ---- Start ----

document.querySelector('.skip').addEventListener('click', (ev) => {
  ev.preventDefault();
  main.focus();
});
window.addEventListener('hashchange', () => route(false));
route(true);

// The public API, called as any LlamaIndex frontend calls it: the workflows API (under the
// deployment when the page is served there), its SSE event stream, the Agent Data API,
// artifacts, a finished report's exports and a report rendered as they render it. Nothing
// else.

export const RESEARCH = 'deep-research';
export const METADATA = 'research-metadata';
const KEY_STORE = 'fathom.apiKey';

/** The workflows API's base path: `/deployments/{name}` when the page is served under it. */
export const base = (() => {
  const m = location.pathname.match(/^(\/deployments\/[^/]+)\/ui(\/|$)/);
  return m ? m[1] : '';
})();

/** An error answer of the API: its status and `detail`. */
export class ApiError extends Error {
  constructor(status, detail, body) {
    super(detail || `HTTP ${status}`);
    this.status = status;
    this.body = body;
  }
}

/** The server could not be reached at all. */
export class Unreachable extends Error {
  constructor() {
    super(`Cannot reach the Fathom server at ${location.origin}. Is \`fathom serve\` running?`);
  }
}

// ---- The API key (asked once, kept in this browser) ----

let apiKey = readKey();

function readKey() {
  try {
    return localStorage.getItem(KEY_STORE) || '';
  } catch {
    return '';
  }
}

export function hasKey() {
  return apiKey !== '';
}

export function setKey(key) {
  apiKey = key.trim();
  try {
    if (apiKey) localStorage.setItem(KEY_STORE, apiKey);
    else localStorage.removeItem(KEY_STORE);
  } catch {
    // Private mode: the key lasts as long as the page.
  }
}

// ---- Who listens for the connection's state ----

const listeners = new Set();
let down = false;

/** `fn(state, detail)` with state `down`, `up` or `key` (a key is needed or was refused). */
export function onConnection(fn) {
  listeners.add(fn);
  return () => listeners.delete(fn);
}

function notify(state, detail) {
  if (state === 'down') down = true;
  if (state === 'up') {
    if (!down) return;
    down = false;
  }
  for (const fn of listeners) fn(state, detail);
}

export function isDown() {
  return down;
}

// ---- Requests ----

/**
 * Calls the API. Returns `{status, body}` for any answer in `accept` (2xx by default);
 * throws ApiError for other answers and Unreachable when there is no answer. With
 * `timeoutMs`, a server that has not answered by then is given up on (an Error, not
 * Unreachable: it did answer the connection).
 */
export async function request(method, path, body, accept, timeoutMs) {
  const headers = { Accept: 'application/json' };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  if (apiKey) headers.Authorization = `Bearer ${apiKey}`;
  const signal = timeoutMs ? AbortSignal.timeout(timeoutMs) : undefined;
  let resp;
  try {
    resp = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: 'no-store',
      signal,
    });
  } catch {
    if (signal && signal.aborted) throw new Error(`the server did not answer within ${timeoutMs / 1000} s`);
    notify('down');
    throw new Unreachable();
  }
  notify('up');
  const text = await resp.text().catch(() => '');
  let json = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch {
    json = null;
  }
  const ok = accept ? accept(resp.status, json) : resp.ok;
  if (ok) return { status: resp.status, body: json };
  const detail = json && typeof json.detail === 'string' ? json.detail : `${resp.status} ${resp.statusText}`;
  if (resp.status === 401) notify('key', detail);
  throw new ApiError(resp.status, detail, json);
}

const wf = (path) => `${base}${path}`;
const enc = encodeURIComponent;

/** Is the server there? (Health is open, with or without a key.) */
export async function healthy() {
  try {
    const resp = await fetch('/livez', { cache: 'no-store' });
    return resp.ok;
  } catch {
    return false;
  }
}

// ---- Workflows and handlers ----

let metadata = null;

/**
 * What `research-metadata` says: the settings JSON Schema (refs resolved), their defaults,
 * and where sessions are saved. Run once per page, as `useMetadata` does.
 */
export function researchMetadata() {
  if (!metadata) {
    metadata = request('POST', wf(`/workflows/${METADATA}/run`), { start_event: {} })
      .then(({ body }) => {
        const value = body && body.result && body.result.value;
        if (!value || !value.json_schema) throw new ApiError(500, 'research-metadata gave no settings schema');
        return value;
      })
      .catch((e) => {
        metadata = null;
        throw e;
      });
  }
  return metadata;
}

/** Starts a research run; returns its handler. */
export async function startResearch(query, settings, followUpOf) {
  const startEvent = { query };
  if (settings && Object.keys(settings).length) startEvent.settings = settings;
  // A follow-up reads the finished session's sources first.
  if (followUpOf) startEvent.follow_up_of = followUpOf;
  const { body } = await request('POST', wf(`/workflows/${RESEARCH}/run-nowait`), { start_event: startEvent });
  return body;
}

/** A handler (a run): 202 running, 200 completed, 500 failed or cancelled, all with its body. */
export async function getHandler(id) {
  const { body } = await request('GET', wf(`/handlers/${enc(id)}`), undefined,
    (status, json) => (status >= 200 && status < 300) || (status === 500 && json && json.handler_id));
  return body;
}

/** Every research run the server knows, with its status. */
export async function listHandlers() {
  const { body } = await request('GET', wf(`/handlers?workflow_name=${enc(RESEARCH)}`));
  return (body && body.handlers) || [];
}

export async function cancelRun(id) {
  await request('POST', wf(`/handlers/${enc(id)}/cancel`));
}

/** The decision at the gate: `{approved, feedback?, plan?, answers?}`. */
export async function sendDecision(id, decision) {
  await request('POST', wf(`/events/${enc(id)}`), {
    event: { type: 'ApproveEvent', value: decision },
  });
}

/**
 * Follows run `id`'s event stream after sequence `after` (-1: from the start). Calls
 * `onEvent(envelope, seq)` per event, `onOpen()`, and `onError(closed)` where `closed` says
 * the browser will not reconnect by itself. Returns a function that stops following.
 */
export function follow(id, after, { onEvent, onOpen, onError }) {
  const q = new URLSearchParams({ sse: 'true', after_sequence: String(after) });
  // EventSource cannot send headers: the key goes in the query string.
  if (apiKey) q.set('api_key', apiKey);
  const es = new EventSource(wf(`/events/${enc(id)}?${q}`));
  es.onmessage = (m) => {
    let env;
    try {
      env = JSON.parse(m.data);
    } catch {
      return;
    }
    const seq = Number.parseInt(m.lastEventId, 10);
    onEvent(env, Number.isNaN(seq) ? null : seq);
  };
  es.onopen = () => {
    notify('up');
    if (onOpen) onOpen();
  };
  es.onerror = () => onError(es.readyState === EventSource.CLOSED);
  return () => es.close();
}

// ---- Reports ----

/** How long a report's rendering may take before the page shows it as written. */
const RENDER_TIMEOUT_MS = 20_000;

/**
 * The report `markdown` rendered by the server as its exports render it: `{title, html,
 * sources: [{n, title, url}], citations}`, `html` being the body without the sources list.
 */
export async function renderReport(markdown) {
  const { body } = await request('POST', wf('/reports/render'), { markdown }, undefined, RENDER_TIMEOUT_MS);
  return body;
}

// ---- Artifacts ----

export function artifactUrl(fileId) {
  return wf(`/artifacts/${enc(fileId)}`);
}

/** Where the finished report of session `id` is exported as `format` (html, pdf, docx). */
export function exportUrl(id, format) {
  return wf(`/sessions/${enc(id)}/export?format=${enc(format)}`);
}

/**
 * Opens or saves an artifact. Without a key a plain link does it; with one, the bytes are
 * fetched with the key and handed over as a blob, so the key never goes in a URL.
 */
export function openArtifact(fileId, name) {
  return download(artifactUrl(fileId), name || fileId);
}

/** Saves what `url` answers as a file: the server's file name if it gives one, else `name`. */
export async function download(url, name) {
  const headers = apiKey ? { Authorization: `Bearer ${apiKey}` } : {};
  let resp;
  try {
    resp = await fetch(url, { headers });
  } catch {
    notify('down');
    throw new Unreachable();
  }
  if (!resp.ok) {
    const json = await resp.json().catch(() => null);
    throw new ApiError(resp.status, (json && json.detail) || `${resp.status} ${resp.statusText}`);
  }
  const given = /filename="([^"]+)"/.exec(resp.headers.get('Content-Disposition') || '');
  const blob = await resp.blob();
  const href = URL.createObjectURL(blob);
  const a = document.createElement('a');
  a.href = href;
  a.download = given ? given[1] : name;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(href), 60_000);
}

// ---- Agent Data: saved sessions ----

const AGENT_DATA = '/api/v1/beta/agent-data';

async function scope() {
  const m = await researchMetadata();
  return { deployment_name: m.deployment_name, collection: m.research_collection };
}

/** A page of saved sessions, newest first: `{items, next_page_token, total_size}`. */
export async function searchSessions(pageToken, pageSize = 50) {
  const body = { ...(await scope()), order_by: 'created_at desc', page_size: pageSize, include_total: true };
  if (pageToken) body.page_token = pageToken;
  const { body: page } = await request('POST', `${AGENT_DATA}/:search`, body);
  return page;
}

/** The saved session of research `id`, or null. */
export async function findSession(id) {
  const body = { ...(await scope()), filter: { research_id: { eq: id } }, page_size: 1 };
  const { body: page } = await request('POST', `${AGENT_DATA}/:search`, body);
  const item = page && page.items && page.items[0];
  return item ? item.data : null;
}

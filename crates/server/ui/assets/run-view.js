// One research run: its plan (reviewed at the gate), who is doing what, the activity as it
// happens, the report as it grows, and its sources. Built from the run's event stream from
// the start, so a reload or a restarted server finds it where it was; a finished session is
// completed from its saved snapshot (Agent Data).

import * as api from './api.js';
import { announce, fill, h, jsonText, plural, uid } from './dom.js';
import { planReviewForm, planSummary } from './plan-review.js';
import { citedSources, renderReport, renderSources, reportStatus, artifactLink, exportLinks } from './report.js';
import { TERMINAL, apply, applySession, approval, changesReport, describeCall, newRun, shortUrl } from './run-state.js';
import { statusBadge } from './home.js';

const TIMELINE_LIMIT = 400;
/** Reads of a run's session record before giving up, and the wait between them. */
const SESSION_TRIES = 5;
const SESSION_RETRY_MS = 500;

const PHASE_TEXT = {
  planning: 'Drafting the plan',
  review: 'Waiting for your approval of the plan',
  running: 'Researching: searching and reading sources',
  writing: 'Writing the report',
  done: 'Finished',
};

/**
 * Mounts the view of run `id` into `main`. Returns `{destroy(), focusSource(n), reconnect()}`.
 */
export function mountRun(main, id) {
  let run = newRun(id);
  let stopFollow = null;
  let retryTimer = null;
  let sessionTimer = null;
  let destroyed = false;
  let pendingFocus = null;
  let planKey = '';
  let backoff = 1000;

  // ---- Skeleton ----
  const title = h('h1', { id: 'run-title' }, 'Loading the research…');
  const status = h('span', { id: 'run-status', 'data-status': 'loading' }, statusBadge('loading'));
  const phase = h('span', { id: 'run-phase', class: 'muted' });
  const alert = h('div', { id: 'run-alert', class: 'run-alert', role: 'alert', hidden: true });
  const conn = h('div', { id: 'run-connection', class: 'notice', role: 'status', hidden: true });
  const actions = h('div', { class: 'run-actions' });
  const planBody = h('div', { id: 'plan' });
  const planPanel = h('section', { class: 'panel', id: 'plan-panel', 'aria-labelledby': 'plan-title' },
    h('h2', { id: 'plan-title' }, 'Plan'), planBody);
  const reportEl = h('div', { id: 'report', class: 'report prose', 'aria-live': 'off' });
  const reportState = h('p', { id: 'report-status', class: 'muted', role: 'status' });
  const reportActions = h('div', { class: 'report-actions' });
  const deliveryEl = h('ul', { id: 'report-delivery', class: 'plain-list delivery', hidden: true });
  const followUpEl = h('div', { id: 'follow-up', hidden: true });
  const reportPanel = h('section', { class: 'panel', id: 'report-panel', 'aria-labelledby': 'report-title' },
    h('div', { class: 'section-head' }, h('h2', { id: 'report-title' }, 'Report'), reportActions),
    reportState, deliveryEl, reportEl, followUpEl);
  const follows = h('p', { id: 'run-follows', class: 'muted', hidden: true });
  const sourcesEl = h('div', { id: 'sources' });
  const sourcesPanel = h('section', { class: 'panel', id: 'sources-panel', 'aria-labelledby': 'sources-title' },
    h('h2', { id: 'sources-title' }, 'Sources'), sourcesEl);
  const agentsEl = h('ul', { id: 'agents', class: 'agents' });
  const timeline = h('ol', { id: 'timeline', class: 'timeline', 'aria-label': 'Activity, oldest first' });
  const timelineNote = h('p', { class: 'muted', hidden: true });
  const side = h('aside', { class: 'run-side', 'aria-label': 'Live activity' },
    h('section', { class: 'panel', id: 'agents-panel', 'aria-labelledby': 'agents-title' },
      h('h2', { id: 'agents-title' }, 'Who is doing what'), agentsEl),
    h('section', { class: 'panel', id: 'activity-panel', 'aria-labelledby': 'activity-title' },
      h('h2', { id: 'activity-title' }, 'Activity'), timelineNote, timeline));
  const article = h('article', { class: 'run', 'data-run-id': id },
    h('header', { class: 'run-head' },
      title,
      h('div', { class: 'run-meta' }, status, phase, h('span', { class: 'muted run-id' }, `id ${id}`)),
      follows, actions, alert, conn),
    h('div', { class: 'run-grid' },
      h('div', { class: 'run-main' }, planPanel, reportPanel, sourcesPanel),
      side));
  fill(main, article);

  // A citation already in the address still takes the reader to its source when clicked.
  reportEl.addEventListener('click', (ev) => {
    const a = ev.target.closest('a.cite');
    if (a && location.hash === a.getAttribute('href')) {
      ev.preventDefault();
      pendingFocus = Number(a.dataset.n);
      tryFocus();
    }
  });

  // ---- Drawing ----

  function drawStatus() {
    const shown = run.status === 'running' && run.phase === 'review' ? 'awaiting_approval' : run.status;
    fill(status, statusBadge(shown));
    status.dataset.status = run.status;
    article.dataset.status = run.status;
    article.dataset.phase = run.phase;
    phase.textContent = TERMINAL.has(run.status) ? '' : (PHASE_TEXT[run.phase] || '');
    phase.hidden = !phase.textContent;
    const q = run.query || (run.plan && run.plan.question) || '';
    title.textContent = q || 'Research';
    const parentId = run.session && run.session.parent_id;
    follows.hidden = !parentId;
    if (parentId) {
      fill(follows, 'Follow-up of ', h('a', { href: `#/run/${encodeURIComponent(parentId)}` },
        `“${run.session.parent_query || parentId}”`), ': its sources are read first.');
    }
    document.title = q ? `${q} · Fathom` : 'Fathom';
    if (run.status === 'failed') {
      alert.hidden = false;
      fill(alert, h('strong', {}, 'The run failed: '), run.error || 'no reason given',
        run.failedStep ? h('span', { class: 'muted' }, ` (in step ${run.failedStep})`) : null);
    } else if (run.status === 'cancelled') {
      alert.hidden = false;
      fill(alert, h('strong', {}, 'The run was cancelled. '), 'What it had done is kept below.');
    } else if (run.gone) {
      alert.hidden = false;
      fill(alert, run.gone);
    } else {
      alert.hidden = true;
    }
    drawActions();
  }

  let confirming = false;
  function drawActions() {
    if (TERMINAL.has(run.status) || run.gone) {
      fill(actions);
      return;
    }
    if (!confirming) {
      fill(actions, h('button', {
        type: 'button', class: 'danger-outline', id: 'cancel-button',
        on: { click: () => { confirming = true; drawActions(); actions.querySelector('#cancel-confirm').focus(); } },
      }, 'Cancel run'));
      return;
    }
    const err = h('span', { class: 'inline-error', role: 'alert' });
    fill(actions, h('span', {}, 'Cancel this research? What it found so far stays in the session. '),
      h('button', {
        type: 'button', class: 'danger', id: 'cancel-confirm',
        on: {
          click: async (ev) => {
            ev.target.disabled = true;
            try {
              await api.cancelRun(id);
              announce('Cancelling the run.');
            } catch (e) {
              ev.target.disabled = false;
              err.textContent = ` ${e.message}`;
            }
          },
        },
      }, 'Yes, cancel'),
      h('button', { type: 'button', class: 'secondary', on: { click: () => { confirming = false; drawActions(); } } }, 'No, keep running'),
      err);
  }

  function drawPlan() {
    const key = `${run.phase}:${run.planRound}:${run.status}:${run.requireApproval}:${JSON.stringify(run.approvedPlan)}:${run.decisions.length}`;
    if (key === planKey) return;
    planKey = key;
    const gate = run.phase === 'review' && run.status === 'running' && run.requireApproval !== false && !run.gone;
    if (!run.plan) {
      fill(planBody, h('p', { class: 'muted' }, run.status === 'running' ? 'Drafting the plan…' : 'No plan was drafted.'));
      planPanel.hidden = false;
      return;
    }
    if (gate) {
      const kwargs = run.planKwargs || {};
      fill(planBody, planReviewForm(run.plan, {
        round: run.planRound,
        feedbackSoFar: Array.isArray(kwargs.feedback) ? kwargs.feedback : [],
        decide: async (decision) => {
          await api.sendDecision(id, decision);
          if (decision.approved) run.approvedPlan = decision.plan || run.plan;
          if (!decision.approved) {
            announce('Feedback sent. Re-planning.');
          } else {
            announce('Plan approved. Research is starting.');
          }
        },
      }));
      planPanel.hidden = false;
      return;
    }
    if (run.phase === 'planning' && run.status === 'running') {
      fill(planBody, h('p', { class: 'notice', role: 'status' }, 'Re-planning with your feedback…'),
        h('details', {}, h('summary', {}, `The previous plan (round ${run.planRound})`), planSummary(run.plan)));
      return;
    }
    const approved = run.approvedPlan;
    const edited = approved && JSON.stringify(approved) !== JSON.stringify(run.plan);
    const label = approved || run.status === 'running'
      ? `Plan (approved${edited ? ' as edited' : ''}, round ${run.planRound || 1})`
      : `Plan (round ${run.planRound || 1})`;
    const by = approval(run);
    const who = by && h('p', { class: 'muted plan-decision', id: 'plan-decision' },
      `Approved by ${by.by || 'anonymous'} at ${when(by.at)}` + (by.plan_round ? ` (plan round ${by.plan_round})` : ''));
    const cancelled = run.decisions.filter((d) => d.action === 'cancelled').pop();
    const stopper = cancelled && h('p', { class: 'muted plan-decision', id: 'cancel-decision' },
      `Cancelled by ${cancelled.by || 'anonymous'} at ${when(cancelled.at)}`);
    fill(planBody, h('details', { class: 'plan-details', id: 'plan-details' }, h('summary', {}, label), planSummary(approved || run.plan)), who, stopper);
  }

  function when(iso) {
    const t = Date.parse(iso);
    return Number.isNaN(t) ? String(iso || '') : new Date(t).toLocaleString();
  }

  function drawAgents() {
    const agents = Array.from(run.agents.values());
    if (!agents.length) {
      fill(agentsEl, h('li', { class: 'muted' }, 'Nobody yet.'));
      return;
    }
    fill(agentsEl, agents.map((a) => h('li', { class: 'agent', 'data-agent': a.name },
      h('span', { class: `agent-name agent-${roleOf(a.name)}` }, a.name),
      h('span', { class: 'agent-doing' }, a.doing || '—'),
      a.searches || a.reads || a.failed
        ? h('span', { class: 'agent-counts muted' }, [
          a.searches ? plural(a.searches, 'search', 'searches') : null,
          a.reads ? `${plural(a.reads, 'page')} read` : null,
          a.failed ? `${a.failed} unreadable` : null,
        ].filter(Boolean).join(' · '))
        : null)));
  }

  const entryEls = new Map();
  function drawEntry(entry) {
    const el = entryView(entry);
    const old = entryEls.get(entry);
    if (old) {
      old.replaceWith(el);
    } else {
      // Follow the newest entry, unless the reader scrolled up to read an older one.
      const atEnd = timeline.scrollTop + timeline.clientHeight >= timeline.scrollHeight - 40;
      timeline.append(el);
      if (atEnd) timeline.scrollTop = timeline.scrollHeight;
      while (timeline.children.length > TIMELINE_LIMIT) {
        timeline.firstElementChild.remove();
      }
      const hidden = run.entries.length - timeline.children.length;
      timelineNote.hidden = hidden <= 0;
      timelineNote.textContent = hidden > 0 ? `${plural(hidden, 'earlier entry', 'earlier entries')} not shown.` : '';
    }
    entryEls.set(entry, el);
  }

  /** Research under way (past the gate, not ended). */
  const researching = () => run.status === 'running' && (run.phase === 'running' || run.phase === 'writing');

  /**
   * Draws the report panel; resolves once the report as it is now is drawn, which waits for
   * the server to render it when it changed.
   */
  async function drawReport() {
    drawReportPanel();
    const md = run.reportMarkdown;
    if (md && !(run.rendered && run.rendered.markdown === md)) {
      try {
        const rendered = await renderOnce(md);
        run.rendered = rendered;
        run.renderError = null;
      } catch (e) {
        if (run.reportMarkdown === md) run.renderError = { markdown: md, message: e.message };
      }
      // A newer report is drawn by the call that asked for it.
      if (destroyed || run.reportMarkdown !== md) return;
      // The cited sources may come from the report's own list.
      drawReportPanel();
      drawSources();
    }
    drawReportBody();
  }

  // The rendering asked for and not yet answered: asked once however many draws wait for it.
  let rendering = null;
  function renderOnce(md) {
    if (!rendering || rendering.markdown !== md) {
      const promise = api.renderReport(md).then((r) => ({ ...r, markdown: md }));
      rendering = { markdown: md, promise };
      const done = () => {
        if (rendering && rendering.promise === promise) rendering = null;
      };
      promise.then(done, done);
    }
    return rendering.promise;
  }

  function drawReportBody() {
    const live = run.status === 'running';
    if (run.reportMarkdown) {
      renderReport(reportEl, run, { citeHref: (n) => `#/run/${encodeURIComponent(id)}/source/${n}`, live });
    } else {
      fill(reportEl);
    }
    reportEl.dataset.live = String(live);
  }

  function drawReportPanel() {
    reportPanel.hidden = !run.reportMarkdown && !researching();
    reportState.textContent = reportStatus(run);
    const fileId = run.reportFileId || (run.result && run.result.report_file_id);
    fill(reportActions,
      fileId ? artifactLink(fileId, 'Download (Markdown)', `report-${id}.md`, 'Download the report as Markdown') : null,
      run.status === 'completed' && run.reportMarkdown ? exportLinks(id) : null);
    drawDelivery();
    drawFollowUp();
  }

  /** What became of the deliveries the run asked for (webhook, email). */
  function drawDelivery() {
    const d = (run.session && run.session.delivery) || {};
    const rows = Object.entries(d).filter(([, c]) => c && typeof c === 'object');
    deliveryEl.hidden = !rows.length;
    const word = { delivered: 'delivered', failed: 'not delivered', pending: 'being delivered' };
    fill(deliveryEl, rows.map(([channel, c]) => h('li', { 'data-channel': channel, 'data-status': c.status },
      h('strong', {}, channel === 'email' ? 'Email' : 'Webhook'),
      ` to ${(c.to || []).join(', ')}: ${word[c.status] || c.status}`,
      c.attempts ? ` (${plural(c.attempts, 'attempt')})` : '',
      c.reason ? h('span', { class: 'muted' }, `: ${c.reason}`) : null)));
  }

  /** A finished report takes follow-up questions: a new run that reads its sources first. */
  let followUpDrawn = false;
  function drawFollowUp() {
    const open = run.status === 'completed' && Boolean(run.reportMarkdown);
    followUpEl.hidden = !open;
    if (!open || followUpDrawn) return;
    followUpDrawn = true;
    const qId = uid('follow-up-question');
    const question = h('textarea', { id: qId, rows: '2', required: true, autocomplete: 'off' });
    const error = h('p', { class: 'form-error', role: 'alert', hidden: true });
    const submit = h('button', { type: 'submit', class: 'secondary', id: 'follow-up-button' }, 'Ask');
    const form = h('form', { class: 'follow-up-form', novalidate: true },
      h('div', { class: 'field' },
        h('label', { for: qId }, 'Ask a follow-up question'),
        question,
        h('p', { class: 'hint' }, 'Answered from this report’s sources first; only what they do not cover is searched.')),
      error, h('div', { class: 'actions' }, submit));
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      error.hidden = true;
      submit.disabled = true;
      try {
        const handler = await api.startResearch(question.value, {}, id);
        location.hash = `#/run/${encodeURIComponent(handler.handler_id)}`;
      } catch (e) {
        error.hidden = false;
        error.textContent = `Not started: ${e.message}`;
      } finally {
        submit.disabled = false;
      }
    });
    fill(followUpEl, form);
  }

  function drawSources() {
    // A saved report's own sources list is enough to show (a session may record no others).
    sourcesPanel.hidden = run.sources.size === 0 && !citedSources(run).length && !researching();
    renderSources(sourcesEl, run);
    if (pendingFocus !== null) tryFocus();
  }

  function drawAll() {
    drawStatus();
    drawPlan();
    drawAgents();
    drawReport();
    drawSources();
    fill(timeline);
    entryEls.clear();
    for (const e of run.entries.slice(-TIMELINE_LIMIT)) drawEntry(e);
  }

  // ---- Following the stream ----

  // Events are handled in order, one at a time. One that changes the report waits for the
  // server to render it, so what follows (the run's end) never shows before the report it
  // follows; of a burst of report changes (a reload replays them all) only the last is drawn.
  const queue = []; // {env, seq} for an event, {fn} for what else the stream said
  let handling = false;
  function onEvent(env, seq) {
    enqueue({ env, seq });
  }
  function later(fn) {
    enqueue({ fn });
  }
  function enqueue(item) {
    queue.push(item);
    if (!handling) handleQueued();
  }

  async function handleQueued() {
    handling = true;
    try {
      while (queue.length && !destroyed) {
        const item = queue.shift();
        if (item.fn) {
          item.fn();
          continue;
        }
        const report = handle(item.env, item.seq);
        if (report && !queue.some((next) => next.env && changesReport(next.env))) await report;
      }
    } finally {
      // A fault drawing one event leaves the next event to carry on.
      handling = false;
    }
  }

  /** Applies one event and draws what changed; returns the report's drawing, when it changed. */
  function handle(env, seq) {
    if (destroyed) return null;
    if (seq !== null && seq <= run.lastSeq) return null; // already seen (a reconnect overlaps)
    const wasPhase = run.phase;
    const wasRound = run.planRound;
    const changed = apply(run, env, seq);
    backoff = 1000;
    if (changed.has('status')) drawStatus();
    if (changed.has('plan') || changed.has('status')) drawPlan();
    if (changed.has('agents')) drawAgents();
    if (changed.entry) drawEntry(changed.entry);
    let report = null;
    if (changed.has('report')) report = drawReport();
    else if (changed.has('plan')) drawReportPanel();
    if (changed.has('sources') || changed.has('plan')) drawSources();
    if (run.planRound !== wasRound && run.phase === 'review') announce(`Plan ready for review (round ${run.planRound}).`);
    else if (wasPhase !== run.phase && run.phase === 'running') {
      announce('Research started.');
      // The plan as approved is saved with the decision (it may have been edited elsewhere).
      api.findSession(id).then((s) => {
        if (destroyed || !s) return;
        applySession(run, s);
        drawStatus();
        drawPlan();
      }).catch(() => {});
    }
    // The first plan: the session is saved by now (with what the run follows up, if anything).
    if (changed.has('plan') && !run.session) loadSession(SESSION_TRIES);
    if (changed.has('report') && run.lastSection && run.status === 'running') announce(`Report updated: ${run.lastSection}.`);
    if (TERMINAL.has(run.status)) finished();
    return report;
  }

  // Reads the run's session record; a miss or a failed request (the server busy, say) is
  // tried again a few times, so what the run follows up still shows.
  function loadSession(tries) {
    clearTimeout(sessionTimer);
    const again = () => {
      if (!destroyed && !run.session && tries > 1) {
        sessionTimer = setTimeout(() => loadSession(tries - 1), SESSION_RETRY_MS);
      }
    };
    api.findSession(id).then((s) => {
      if (destroyed || run.session) return;
      if (!s) return again();
      run.session = s;
      drawStatus();
    }).catch(again);
  }

  function connect() {
    if (destroyed || TERMINAL.has(run.status)) return;
    clearTimeout(retryTimer);
    if (stopFollow) stopFollow();
    // The stream's opening and errors are handled in order with its events: a stream the
    // server ends after the run's last event is not an interruption.
    const follower = api.follow(id, run.lastSeq, {
      onEvent,
      onOpen: () => later(() => {
        if (stopFollow === follower) conn.hidden = true;
      }),
      onError: (closed) => later(() => {
        if (destroyed || TERMINAL.has(run.status) || stopFollow !== follower) return;
        if (!closed) {
          // The browser reconnects by itself, resuming after the last event it got.
          conn.hidden = false;
          conn.textContent = 'Live updates interrupted. Reconnecting…';
          return;
        }
        stopFollow();
        stopFollow = null;
        sync();
      }),
    });
    stopFollow = follower;
  }

  /** The stream closed without a stop event: ask the handler what became of the run. */
  async function sync() {
    if (destroyed) return;
    try {
      const handler = await api.getHandler(id);
      conn.hidden = true;
      if (TERMINAL.has(handler.status)) {
        if (!TERMINAL.has(run.status)) {
          run.status = handler.status;
          run.error = handler.error || run.error;
          run.phase = 'done';
          finished();
        }
        return;
      }
      retryTimer = setTimeout(connect, 300);
    } catch (e) {
      if (e instanceof api.ApiError && e.status === 404) {
        await fromSessionOnly();
        return;
      }
      if (e instanceof api.ApiError && e.status === 401) return; // the key form takes over
      conn.hidden = false;
      conn.textContent = e instanceof api.Unreachable
        ? 'The server cannot be reached. Retrying…'
        : `Live updates stopped: ${e.message}. Retrying…`;
      retryTimer = setTimeout(sync, backoff);
      backoff = Math.min(backoff * 2, 10_000);
    }
  }

  let finishedOnce = false;
  async function finished() {
    if (stopFollow) {
      stopFollow();
      stopFollow = null;
    }
    // A run that ended has no live updates left to wait for.
    conn.hidden = true;
    drawAll();
    if (finishedOnce) return;
    finishedOnce = true;
    announce(run.status === 'completed' ? 'The research is finished. The report is ready.'
      : run.status === 'failed' ? `The run failed: ${run.error || ''}` : 'The run was cancelled.');
    // The handler has the failure's reason; the saved session has each source's fate.
    try {
      const handler = await api.getHandler(id);
      if (handler.error && !run.error) run.error = handler.error;
    } catch {
      // The stream said enough.
    }
    try {
      applySession(run, await api.findSession(id));
    } catch {
      // Shown from the stream alone.
    }
    if (!destroyed) drawAll();
  }

  /** No handler: show the saved session, if there is one. */
  async function fromSessionOnly() {
    let session = null;
    try {
      session = await api.findSession(id);
    } catch (e) {
      run.gone = `This research could not be loaded: ${e.message}`;
    }
    if (session) {
      applySession(run, session);
      run.status = session.status === 'completed' ? 'completed' : session.status === 'failed' ? 'failed' : 'cancelled';
      run.phase = 'done';
      if (run.status === 'cancelled') run.gone = 'The server no longer has this run; this is its saved session.';
      if (!run.result && session.cited_sources) run.result = { sources: session.cited_sources };
    } else if (!run.gone) {
      run.gone = h('span', {}, `There is no research with id “${id}”. `, h('a', { href: '#/' }, 'Start a new one'), '.');
    }
    drawAll();
  }

  async function load() {
    drawAll();
    try {
      await api.getHandler(id);
    } catch (e) {
      if (e instanceof api.ApiError && e.status === 404) {
        await fromSessionOnly();
        return;
      }
      if (e instanceof api.ApiError && e.status === 401) return;
      conn.hidden = false;
      conn.textContent = e instanceof api.Unreachable ? 'The server cannot be reached. Retrying…' : e.message;
      retryTimer = setTimeout(load, backoff);
      backoff = Math.min(backoff * 2, 10_000);
      return;
    }
    conn.hidden = true;
    // The saved session knows the settings (is there a gate?) before the stream says.
    api.findSession(id).then((s) => {
      if (!s || destroyed) return;
      run.session = s;
      if (typeof (s.settings || {}).require_approval === 'boolean') run.requireApproval = s.settings.require_approval;
      if (!run.query && s.query) run.query = s.query;
      // Always redrawn: the header shows what the run follows up, and once a session is
      // known no later plan event reads it again.
      drawStatus();
      planKey = '';
      drawPlan();
    }).catch(() => {});
    connect();
  }

  // ---- Focusing a cited source ----

  function tryFocus() {
    const el = document.getElementById(`source-${pendingFocus}`);
    if (!el) return;
    pendingFocus = null;
    document.querySelectorAll('.source.flash').forEach((x) => x.classList.remove('flash'));
    el.classList.add('flash');
    el.scrollIntoView({ block: 'center' });
    el.focus({ preventScroll: true });
  }

  load();

  return {
    id,
    destroy() {
      destroyed = true;
      clearTimeout(retryTimer);
      clearTimeout(sessionTimer);
      if (stopFollow) stopFollow();
    },
    focusSource(n) {
      pendingFocus = n;
      tryFocus();
    },
    /** The server is back: carry on where the stream left off. */
    reconnect() {
      if (destroyed) return;
      if (!stopFollow && !TERMINAL.has(run.status)) sync();
      // A report shown as written because the server was away is rendered now.
      if (run.renderError) drawReport();
    },
  };
}

function roleOf(name) {
  if (name.startsWith('researcher')) return 'researcher';
  if (name === 'planner' || name === 'writer') return name;
  return 'other';
}

const TOOL_LABEL = {
  web_search: 'Searched',
  fetch_url: 'Read',
  parse_content: 'Parsed',
  update_report: 'Updated the report',
  decompose_query: 'Drafted the plan',
  route_query: 'Chose how to answer:',
  search_local: 'Looked at the local sources:',
};

function clip(s, n) {
  const t = String(s || '');
  return t.length > n ? `${t.slice(0, n - 1)}…` : t;
}

function entryView(e) {
  const who = e.agent ? h('span', { class: `agent-name agent-${roleOf(e.agent)}` }, e.agent) : null;
  switch (e.kind) {
    case 'input': {
      const lines = e.text.split('\n');
      return h('li', { class: 'entry entry-input', 'data-kind': 'input' }, who,
        h('span', { class: 'entry-text' }, clip(lines.find((l) => l.trim()) || '', 200)),
        lines.length > 1 ? h('details', {}, h('summary', {}, 'Full text'), h('pre', { class: 'wrap' }, e.text)) : null);
    }
    case 'stream':
      return h('li', { class: 'entry entry-stream', 'data-kind': 'stream' }, who,
        h('span', { class: 'entry-text muted' }, 'is writing:'),
        h('div', { class: 'stream-text' }, e.text.length > 1500 ? `…${e.text.slice(-1500)}` : e.text));
    case 'output':
      return h('li', { class: 'entry entry-output', 'data-kind': 'output' }, who,
        h('span', { class: 'entry-text' }, e.agent === 'writer' ? 'finished the report' : 'finished'),
        e.text ? h('details', {}, h('summary', {}, 'What it said'), h('pre', { class: 'wrap' }, clip(e.text, 20000))) : null);
    case 'tool':
      return toolView(e, who);
    case 'stop':
      return h('li', { class: `entry entry-stop entry-${e.status}`, 'data-kind': 'stop' },
        h('span', { class: 'entry-text' }, e.status === 'completed' ? 'The run completed.'
          : e.status === 'cancelled' ? 'The run was cancelled.' : `The run failed: ${e.error || ''}`));
    default:
      // An event type this UI does not know: shown as it came.
      return h('li', { class: 'entry entry-other', 'data-kind': 'other', 'data-type': e.type },
        h('span', { class: 'entry-type' }, e.type || 'event'),
        h('details', {}, h('summary', {}, 'Details'), h('pre', { class: 'json' }, jsonText(e.value))));
  }
}

function size(bytes) {
  if (!(bytes >= 0)) return '';
  if (bytes < 1000) return `${bytes} bytes`;
  if (bytes < 1e6) return `${(bytes / 1000).toFixed(1)} kB`;
  return `${(bytes / 1e6).toFixed(1)} MB`;
}

/** What a known tool's result says, in brief (its full text is in the stream). */
function known(e) {
  const raw = e.raw || {};
  if (e.tool === 'fetch_url' && raw.size !== undefined) {
    return `(${[size(raw.size), raw.content_type].filter(Boolean).join(', ')})`;
  }
  if (e.tool === 'parse_content' && raw.words !== undefined) {
    return `(${plural(raw.words, 'word')}${raw.pages ? `, ${plural(raw.pages, 'page')}` : ''})`;
  }
  return '';
}

function toolView(e, who) {
  const kw = e.kwargs || {};
  const state = e.pending ? 'pending' : e.error ? 'error' : 'ok';
  let what;
  switch (e.tool) {
    case 'web_search': what = h('span', {}, 'Searched ', h('q', { class: 'query' }, kw.query || '')); break;
    case 'fetch_url': what = h('span', {}, e.error ? 'Could not read ' : 'Read ', h('span', { class: 'url', title: String(kw.url || '') }, clip(shortUrl(kw.url), 120))); break;
    case 'parse_content': what = e.raw && e.raw.title
      ? h('span', {}, 'Parsed ', h('q', { title: String(kw.url || '') }, clip(e.raw.title, 120)))
      : h('span', {}, 'Parsed ', h('span', { class: 'url', title: String(kw.url || '') }, clip(shortUrl(kw.url), 120)));
      break;
    case 'update_report': what = h('span', {}, 'Updated the report: ', h('q', {}, kw.section || '')); break;
    case 'decompose_query': what = h('span', {}, 'Drafted the plan'); break;
    default: what = h('span', {}, TOOL_LABEL[e.tool] || `Called ${e.tool}`);
  }
  const detail = e.pending ? h('span', { class: 'muted' }, ` ${describeCall(e.tool, kw)}…`)
    : e.error ? h('p', { class: 'entry-error' }, h('strong', {}, 'Why: '), e.text || 'no reason given')
      : e.tool === 'web_search' && e.raw && Array.isArray(e.raw.hits)
        ? h('span', {},
          h('details', {}, h('summary', {}, plural(e.raw.hits.length, 'result')),
            h('ul', { class: 'plain-list' }, e.raw.hits.map((hit) => h('li', {}, hit.title || hit.url)))),
          // Part of the search failed (the web, say) while the rest answered.
          e.raw.missing ? h('p', { class: 'entry-error' }, h('strong', {}, 'Not all searched: '), e.raw.missing) : null)
        : e.tool === 'update_report' || e.tool === 'decompose_query' ? null
          : known(e) ? h('span', { class: 'muted entry-result' }, ` ${known(e)}`)
            : e.text ? h('span', { class: 'muted entry-result' }, ` ${clip(e.text.split('\n')[0], 160)}`) : null;
  return h('li', { class: `entry entry-tool entry-${state}`, 'data-kind': 'tool', 'data-tool': e.tool || '', 'data-state': state },
    who, h('span', { class: 'entry-text' }, what), detail);
}

// The plan at the gate: its clarifying questions (answer them to re-plan), its search queries
// and outline (edit, add, remove, reorder), and the decision: approve, or reject with feedback.
// Fields of the plan this UI does not know are shown as they are.

import { h, jsonText, plural, uid } from './dom.js';
import { humanize } from './settings-form.js';

const KNOWN = new Set(['question', 'clarifying_questions', 'queries', 'outline', 'background', 'follow_up', 'query_sources']);

/** The kinds of source a query may search, as the plan names them, and as a person reads them. */
const SOURCE_KINDS = [['corpus', 'local files'], ['web', 'web']];

/** Where query `q` searches, when the plan says (a run that may search more than one kind). */
function sourcesOf(plan, q) {
  const all = plan && plan.query_sources;
  return all && Array.isArray(all[q]) ? all[q] : null;
}

/** `local files + web`: a query's sources as a person reads them. */
function sourcesText(kinds) {
  return SOURCE_KINDS.filter(([k]) => kinds.includes(k)).map(([, label]) => label).join(' + ');
}

/** A read-only view of any JSON value: text, lists, key/value lists, or JSON. */
export function valueView(value, depth = 0) {
  if (value === null || value === undefined) return h('span', { class: 'muted' }, '—');
  if (typeof value === 'string') return h('span', { class: 'prose' }, value);
  if (typeof value !== 'object') return h('span', {}, String(value));
  if (depth > 3) return h('pre', { class: 'json' }, jsonText(value));
  if (Array.isArray(value)) {
    if (!value.length) return h('span', { class: 'muted' }, 'none');
    return h('ul', { class: 'plain-list' }, value.map((v) => h('li', {}, valueView(v, depth + 1))));
  }
  const entries = Object.entries(value);
  if (!entries.length) return h('span', { class: 'muted' }, 'none');
  return h('dl', { class: 'kv' }, entries.map(([k, v]) => [h('dt', {}, humanize(k)), h('dd', {}, valueView(v, depth + 1))]));
}

/** What the first look at the local sources found, which shaped the plan. */
function backgroundView(plan) {
  const hits = Array.isArray(plan && plan.background) ? plan.background : [];
  if (!hits.length) return null;
  return h('section', { class: 'extra background', 'data-field': 'background' },
    h('h4', {}, 'What the local sources say'),
    h('ul', { class: 'plain-list' }, hits.map((b) => h('li', {},
      h('strong', {}, b.heading && b.heading !== b.title ? `${b.title} › ${b.heading}` : (b.title || b.url || '')),
      b.snippet ? h('span', { class: 'muted' }, ` ${b.snippet}`) : null))));
}

/** A follow-up's plan: which queries the followed-up session's sources answer, which are
 * searched again. */
function followUpView(plan) {
  const f = plan && plan.follow_up;
  if (!f || typeof f !== 'object') return null;
  const covered = Array.isArray(f.covered) ? f.covered : [];
  const search = Array.isArray(f.search) ? f.search : [];
  return h('section', { class: 'extra follow-up', 'data-field': 'follow_up' },
    h('h4', {}, 'Follows up ',
      h('a', { href: `#/run/${encodeURIComponent(f.parent_id || '')}` }, `session ${f.parent_id || ''}`)),
    h('p', {}, 'Answered by its sources, not searched again: ',
      covered.length ? null : h('span', { class: 'muted' }, 'none')),
    covered.length ? h('ul', { class: 'plain-list', 'data-list': 'covered' }, covered.map((c) => h('li', {},
      c.query, h('span', { class: 'muted' }, ` (${plural((c.sources || []).length, 'source')})`)))) : null,
    h('p', {}, 'New searches: ', search.length ? null : h('span', { class: 'muted' }, 'none')),
    search.length ? h('ul', { class: 'plain-list', 'data-list': 'search' }, search.map((q) => h('li', {}, q))) : null);
}

/** The plan's fields other than question, queries, outline and clarifying questions. */
export function extraFields(plan) {
  const extras = Object.entries(plan || {}).filter(([k]) => !KNOWN.has(k));
  const background = backgroundView(plan);
  const followUp = followUpView(plan);
  if (!extras.length && !background && !followUp) return null;
  return h('div', { class: 'plan-extra' },
    followUp,
    background,
    extras.map(([k, v]) => h('section', { class: 'extra', 'data-field': k },
      h('h4', {}, humanize(k)), valueView(v))));
}

/** The plan as a person reads it (no editing). */
export function planSummary(plan) {
  return h('div', { class: 'plan-summary' },
    h('div', { class: 'plan-cols' },
      h('section', {}, h('h4', {}, 'Search queries'),
        h('ul', { class: 'plain-list queries-ro' }, (plan.queries || []).map((q) => {
          const kinds = sourcesOf(plan, q);
          return h('li', {}, q, kinds ? h('span', { class: 'muted', 'data-sources': kinds.join(',') }, ` — ${sourcesText(kinds)}`) : null);
        }))),
      h('section', {}, h('h4', {}, 'Report outline'),
        h('ol', { class: 'outline-ro' }, (plan.outline || []).map((o) => h('li', {}, o))))),
    (plan.clarifying_questions || []).length
      ? h('section', {}, h('h4', {}, 'Clarifying questions'),
        h('ul', { class: 'plain-list' }, plan.clarifying_questions.map((q) => h('li', {}, q))))
      : null,
    extraFields(plan));
}

/**
 * An editable list of strings: one input per entry, with add, remove and reorder. With
 * `kinds(value)` (the sources of a query), each entry also has a checkbox per kind of source.
 */
function editableList({ name, legend, noun, values, reorder, kinds }) {
  const list = h('ol', { class: 'edit-list', 'data-list': name });
  const fieldset = h('fieldset', { class: 'edit-fieldset' }, h('legend', {}, legend), list);
  const rows = () => Array.from(list.children);

  function renumber() {
    rows().forEach((row, k) => {
      const input = row.querySelector('input[type=text]');
      input.setAttribute('aria-label', `${noun} ${k + 1}`);
      row.querySelectorAll('input[data-kind]').forEach((box) => {
        const label = SOURCE_KINDS.find(([kind]) => kind === box.dataset.kind)[1];
        box.setAttribute('aria-label', `${noun} ${k + 1} searches ${label}`);
      });
      row.querySelectorAll('button[data-act]').forEach((b) => {
        const act = b.dataset.act;
        b.setAttribute('aria-label', `${act === 'up' ? 'Move up' : act === 'down' ? 'Move down' : 'Remove'} ${noun.toLowerCase()} ${k + 1}`);
        if (act === 'up') b.disabled = k === 0;
        if (act === 'down') b.disabled = k === rows().length - 1;
      });
    });
  }

  function row(value) {
    const input = h('input', { type: 'text', value, name, autocomplete: 'off' });
    const chosen = kinds ? (kinds(value) || SOURCE_KINDS.map(([k]) => k)) : null;
    const boxes = chosen ? h('span', { class: 'source-kinds' }, SOURCE_KINDS.map(([k, label]) =>
      h('label', { class: 'inline' },
        h('input', { type: 'checkbox', 'data-kind': k, checked: chosen.includes(k) }), ` ${label}`))) : null;
    const li = h('li', { class: 'edit-row' }, input, boxes,
      reorder ? h('button', { type: 'button', class: 'icon-button', 'data-act': 'up', title: 'Move up' }, '↑') : null,
      reorder ? h('button', { type: 'button', class: 'icon-button', 'data-act': 'down', title: 'Move down' }, '↓') : null,
      h('button', { type: 'button', class: 'icon-button', 'data-act': 'remove', title: 'Remove' }, '×'));
    li.addEventListener('click', (ev) => {
      const b = ev.target.closest('button[data-act]');
      if (!b) return;
      const act = b.dataset.act;
      if (act === 'remove') {
        const next = li.nextElementSibling || li.previousElementSibling;
        li.remove();
        renumber();
        if (next) next.querySelector('input[type=text]').focus();
        else add.focus();
      } else if (act === 'up' && li.previousElementSibling) {
        list.insertBefore(li, li.previousElementSibling);
        renumber();
        b.disabled ? li.querySelector('[data-act=down]').focus() : b.focus();
      } else if (act === 'down' && li.nextElementSibling) {
        list.insertBefore(li.nextElementSibling, li);
        renumber();
        b.disabled ? li.querySelector('[data-act=up]').focus() : b.focus();
      }
    });
    return li;
  }

  const add = h('button', { type: 'button', class: 'secondary small', 'data-add': name }, `Add ${noun.toLowerCase()}`);
  add.addEventListener('click', () => {
    const r = row('');
    list.append(r);
    renumber();
    r.querySelector('input[type=text]').focus();
  });
  for (const v of values) list.append(row(v));
  fieldset.append(add);
  renumber();
  return {
    el: fieldset,
    values: () => rows().map((r) => r.querySelector('input[type=text]').value.trim()).filter(Boolean),
    /** `{entry: [kinds]}` for every entry, when entries have kinds. */
    kinds: () => Object.fromEntries(rows()
      .map((r) => [r.querySelector('input[type=text]').value.trim(),
        Array.from(r.querySelectorAll('input[data-kind]')).filter((b) => b.checked).map((b) => b.dataset.kind)])
      .filter(([v]) => v)),
  };
}

/**
 * The review form for `plan` (round `round`). `decide(decision)` sends the decision and
 * resolves or throws with the server's message.
 */
export function planReviewForm(plan, { round, feedbackSoFar, decide }) {
  const questions = plan.clarifying_questions || [];
  const answerInputs = questions.map((q) => {
    const id = uid('answer');
    return { q, input: h('input', { type: 'text', id, autocomplete: 'off' }), id };
  });
  const hasKinds = plan.query_sources && Object.keys(plan.query_sources).length > 0;
  const queries = editableList({
    name: 'query', legend: hasKinds ? 'Search queries, and where each searches' : 'Search queries', noun: 'Query',
    values: plan.queries || [], reorder: false, kinds: hasKinds ? (q) => sourcesOf(plan, q) : null,
  });
  const outline = editableList({ name: 'section', legend: 'Report outline', noun: 'Section', values: plan.outline || [], reorder: true });
  const feedbackId = uid('feedback');
  const feedback = h('textarea', { id: feedbackId, rows: '3', 'aria-describedby': `${feedbackId}-hint` });
  const error = h('div', { class: 'form-error', role: 'alert', hidden: true, tabIndex: -1 });
  const note = h('p', { class: 'muted', role: 'status' });
  const approve = h('button', { type: 'submit', class: 'primary', id: 'approve-button' }, 'Approve and start research');
  const reject = h('button', { type: 'button', class: 'secondary', id: 'reject-button' },
    questions.length ? 'Answer and re-plan' : 'Reject and re-plan');

  const form = h('form', { class: 'plan-form', novalidate: true, id: 'plan-form' },
    h('p', { class: 'plan-question' }, h('span', { class: 'muted' }, `Plan, round ${round}, for: `), h('strong', {}, plan.question || '')),
    feedbackSoFar && feedbackSoFar.length
      ? h('div', { class: 'feedback-so-far' }, h('h4', {}, 'Your earlier feedback'),
        h('ul', { class: 'plain-list' }, feedbackSoFar.map((f) => h('li', {}, f))))
      : null,
    questions.length
      ? h('fieldset', { class: 'clarify', 'aria-describedby': 'clarify-hint' },
        h('legend', {}, 'Clarifying questions'),
        h('p', { class: 'hint', id: 'clarify-hint' }, 'The question is broad. Answer what you can, then choose “Answer and re-plan”.'),
        answerInputs.map(({ q, input, id }) => h('div', { class: 'field' }, h('label', { for: id }, q), input)))
      : null,
    h('div', { class: 'plan-cols' }, queries.el, outline.el),
    extraFields(plan),
    h('div', { class: 'field' },
      h('label', { for: feedbackId }, 'Feedback'),
      feedback,
      h('p', { id: `${feedbackId}-hint`, class: 'hint' }, 'To get a new plan, say what should change and choose “re-plan”.')),
    error,
    h('div', { class: 'actions' }, approve, reject),
    note);

  const say = (msg) => {
    error.hidden = !msg;
    error.textContent = msg || '';
    if (msg) error.focus();
  };
  const busy = (on, text) => {
    approve.disabled = on;
    reject.disabled = on;
    note.textContent = text || '';
  };

  function edited() {
    const next = { ...plan, queries: queries.values(), outline: outline.values() };
    if (hasKinds) next.query_sources = queries.kinds();
    const same = JSON.stringify(next.queries) === JSON.stringify(plan.queries || [])
      && JSON.stringify(next.outline) === JSON.stringify(plan.outline || [])
      && (!hasKinds || next.queries.every((q) =>
        JSON.stringify([...next.query_sources[q]].sort()) === JSON.stringify([...(sourcesOf(plan, q) || [])].sort())));
    return same ? null : next;
  }

  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    say(null);
    const decision = { approved: true };
    const changed = edited();
    if (changed) decision.plan = changed;
    if (feedback.value.trim()) decision.feedback = feedback.value.trim();
    busy(true, 'Sending your approval…');
    try {
      await decide(decision);
      busy(true, changed ? 'Approved with your edits. Research is starting…' : 'Approved. Research is starting…');
    } catch (e) {
      busy(false);
      say(e.message);
    }
  });

  reject.addEventListener('click', async () => {
    say(null);
    const answers = answerInputs.map(({ input }) => input.value.trim()).filter(Boolean);
    const text = feedback.value.trim();
    if (!text && !answers.length) {
      say(questions.length
        ? 'Answer at least one question, or say in Feedback what should change, to get a new plan.'
        : 'Say in Feedback what should change, to get a new plan.');
      (questions.length ? answerInputs[0].input : feedback).focus();
      return;
    }
    const decision = { approved: false };
    if (text) decision.feedback = text;
    if (answers.length) decision.answers = answers;
    busy(true, 'Sending…');
    try {
      await decide(decision);
      busy(true, `Re-planning with your ${text ? 'feedback' : plural(answers.length, 'answer')}…`);
    } catch (e) {
      busy(false);
      say(e.message);
    }
  });
  return form;
}

// What a run's event stream says, folded into one state. No DOM here: `apply` takes an event
// envelope (`{type, types, value}`) and says what changed, and the view redraws that part.
// Event types the UI does not know are kept and shown as they are.

export const TERMINAL = new Set(['completed', 'failed', 'cancelled']);

export function newRun(id) {
  return {
    id,
    status: 'running', // running | completed | failed | cancelled
    error: null,
    query: '',
    /** idle | planning | review | running | writing | done */
    phase: 'planning',
    plan: null,
    planRound: 0,
    planKwargs: null,
    /** The plan as approved (an edited one differs from the proposal): from the decision
     * sent here, the saved session, or the result. */
    approvedPlan: null,
    /** Decisions taken on the run ({action, by, at, approved, feedback, plan_round}): from
     * the stream (the planner's input that carries one) or the saved session. */
    decisions: [],
    /** Settings from the saved session, when known. */
    requireApproval: null,
    agents: new Map(), // name -> {name, doing, searches, reads, lastAt}
    lastResearcher: null,
    /** Timeline entries, in order; tool entries are updated in place. */
    entries: [],
    toolEntries: new Map(), // tool_id -> entry
    /** Sources by URL (without any #page): {url, title, snippet, status, error, fileId, parsedId, pages, query}. */
    sources: new Map(),
    reportMarkdown: '',
    /** The report as the server rendered it ({markdown, title, html, sources, citations}),
     * and why it could not be ({markdown, message}); the view keeps these. */
    rendered: null,
    renderError: null,
    reportUpdates: 0,
    lastSection: null,
    result: null,
    lastSeq: -1,
    events: 0,
  };
}

/** The URL of a source without the `#page=N` a PDF citation adds. */
export function baseUrl(url) {
  return String(url || '').replace(/#page=\d+$/, '');
}

function text(message) {
  if (!message) return '';
  if (typeof message.content === 'string') return message.content;
  return (message.blocks || []).map((b) => b.text || '').join('');
}

/** The text of a ToolOutput: `content` (older llama_index) or its text blocks. */
export function toolText(output) {
  if (!output) return '';
  if (typeof output.content === 'string') return output.content;
  return (output.blocks || []).map((b) => b.text || '').join('\n');
}

/**
 * Which agent made a tool call: the researcher named in ids like `web_search-s1r2t0`, the
 * planner and writer by their tools, else the last researcher active.
 */
function agentOf(run, tool, toolId) {
  const m = /-s\d+r(\d+)/.exec(toolId || '');
  if (m) return `researcher-${m[1]}`;
  if (tool === 'decompose_query' || tool === 'search_local') return 'planner';
  if (tool === 'route_query') return 'coordinator';
  if (tool === 'update_report') return 'writer';
  return run.lastResearcher || 'researcher';
}

function agent(run, name) {
  let a = run.agents.get(name);
  if (!a) {
    a = { name, doing: '', searches: 0, reads: 0, failed: 0 };
    run.agents.set(name, a);
  }
  if (name.startsWith('researcher')) run.lastResearcher = name;
  return a;
}

function source(run, url) {
  const key = baseUrl(url);
  let s = run.sources.get(key);
  if (!s) {
    s = { url: key, title: '', snippet: '', status: 'found', error: null, fileId: null, parsedId: null, pages: null };
    run.sources.set(key, s);
  }
  return s;
}

/** Does `env` change the report? (The view draws a burst of changes once, at its last.) */
export function changesReport(env) {
  const v = env.value || {};
  return env.type === 'ToolCallResult' && v.tool_name === 'update_report';
}

function isStop(env) {
  return env.type === 'StopEvent' || (Array.isArray(env.types) && env.types.includes('StopEvent'));
}

function push(run, entry) {
  entry.index = run.entries.length;
  run.entries.push(entry);
  return entry;
}

/**
 * Folds one envelope into `run`. Returns the set of parts that changed: `status`, `plan`,
 * `agents`, `timeline` (with `entry` set to the entry added or changed), `report`, `sources`.
 */
export function apply(run, env, seq) {
  const changed = new Set();
  changed.entry = null;
  run.events += 1;
  if (seq !== null && seq !== undefined) run.lastSeq = Math.max(run.lastSeq, seq);
  const v = env.value || {};
  const type = env.type;

  if (isStop(env)) {
    stop(run, env);
    changed.add('status');
    changed.add('sources');
    changed.add('report');
    changed.entry = push(run, { kind: 'stop', type, value: v, status: run.status, error: run.error });
    changed.add('timeline');
    return changed;
  }

  switch (type) {
    case 'AgentInput': {
      const name = v.current_agent_name || 'agent';
      const said = (v.input || []).map(text).join('\n').trim();
      const a = agent(run, name);
      a.doing = firstLine(said);
      // A decision on the plan (who, when, which round), not a question for the planner.
      const decision = (v.input || []).map((m) => m && m.additional_kwargs && m.additional_kwargs.decision).find(Boolean);
      if (decision) {
        addDecision(run, decision);
        changed.add('plan');
        changed.add('agents');
        changed.entry = push(run, { kind: 'input', agent: name, text: said });
        break;
      }
      if (name === 'planner' && !run.query && said) run.query = said;
      if (name === 'planner' && run.plan) {
        run.phase = 'planning';
        changed.add('plan');
      }
      // The researcher's first input is the plan as approved: the gate is passed.
      if (name.startsWith('researcher') && (run.phase === 'review' || run.phase === 'planning')) {
        run.phase = 'running';
        if (run.agents.has('planner')) run.agents.get('planner').doing = 'plan approved';
        changed.add('plan');
      }
      changed.add('agents');
      changed.add('status');
      changed.entry = push(run, { kind: 'input', agent: name, text: said });
      break;
    }
    case 'AgentStream': {
      const name = v.current_agent_name || 'agent';
      const a = agent(run, name);
      if (name === 'writer') run.phase = run.phase === 'done' ? 'done' : 'writing';
      const last = run.entries[run.entries.length - 1];
      if (last && last.kind === 'stream' && last.agent === name) {
        last.text += v.delta || '';
        changed.entry = last;
      } else {
        changed.entry = push(run, { kind: 'stream', agent: name, text: v.delta || v.response || '' });
      }
      a.doing = 'writing';
      changed.add('agents');
      break;
    }
    case 'AgentOutput': {
      const name = v.current_agent_name || 'agent';
      const a = agent(run, name);
      a.doing = 'done';
      const said = text(v.response);
      changed.entry = push(run, { kind: 'output', agent: name, text: said });
      changed.add('agents');
      break;
    }
    case 'ToolCall': {
      const name = agentOf(run, v.tool_name, v.tool_id);
      const entry = push(run, {
        kind: 'tool', agent: name, tool: v.tool_name, id: v.tool_id, kwargs: v.tool_kwargs || {},
        pending: true, error: false, text: '', raw: null,
      });
      if (v.tool_id) run.toolEntries.set(v.tool_id, entry);
      const a = agent(run, name);
      a.doing = describeCall(v.tool_name, v.tool_kwargs || {});
      if (v.tool_name === 'decompose_query') {
        run.phase = 'planning';
        changed.add('plan');
      } else if (run.phase === 'review' || run.phase === 'planning') {
        if (run.plan) run.phase = 'running';
        changed.add('plan');
      }
      changed.entry = entry;
      changed.add('agents');
      break;
    }
    case 'ToolCallResult': {
      let entry = v.tool_id ? run.toolEntries.get(v.tool_id) : null;
      if (!entry) {
        entry = push(run, { kind: 'tool', agent: agentOf(run, v.tool_name, v.tool_id), tool: v.tool_name, id: v.tool_id, kwargs: v.tool_kwargs || {} });
        if (v.tool_id) run.toolEntries.set(v.tool_id, entry);
      }
      const out = v.tool_output || {};
      entry.pending = false;
      entry.error = Boolean(out.is_error);
      entry.text = toolText(out);
      entry.raw = out.raw_output === undefined ? null : out.raw_output;
      changed.entry = entry;
      toolResult(run, entry, changed);
      changed.add('agents');
      break;
    }
    default:
      changed.entry = push(run, { kind: 'other', type, types: env.types || null, value: v });
  }
  changed.add('timeline');
  return changed;
}

function firstLine(s) {
  const line = String(s || '').split('\n').find((l) => l.trim()) || '';
  return line.length > 160 ? `${line.slice(0, 157)}…` : line;
}

/** A URL as a person reads it: a local file by its folder and name, a web page without its scheme. */
export function shortUrl(url) {
  const u = String(url || '');
  if (u.startsWith('file://')) {
    const parts = u.slice(7).split('/').filter(Boolean);
    return parts.length > 2 ? `…/${parts.slice(-2).join('/')}` : u.slice(7);
  }
  return u.replace(/^https?:\/\//, '');
}

export function describeCall(tool, kwargs) {
  switch (tool) {
    case 'web_search': return `searching “${kwargs.query || ''}”`;
    case 'fetch_url': return `reading ${shortUrl(kwargs.url)}`;
    case 'parse_content': return `parsing ${shortUrl(kwargs.url)}`;
    case 'update_report': return `writing “${kwargs.section || ''}”`;
    case 'decompose_query': return 'drafting the plan';
    case 'route_query': return 'choosing how to answer';
    case 'search_local': return 'looking at the local sources';
    case 'search_session': return 'looking at the sources of the session followed up';
    case 'deliver_webhook': return `delivering to ${shortUrl((kwargs.to || [])[0] || '')} (attempt ${kwargs.attempt || 1})`;
    case 'deliver_email': return `emailing ${(kwargs.to || []).join(', ')} (attempt ${kwargs.attempt || 1})`;
    default: return `calling ${tool}`;
  }
}

function toolResult(run, entry, changed) {
  const a = agent(run, entry.agent);
  const raw = entry.raw || {};
  const kw = entry.kwargs || {};
  switch (entry.tool) {
    case 'decompose_query':
      if (!entry.error && raw && typeof raw === 'object') {
        run.plan = raw;
        run.planRound += 1;
        run.planKwargs = kw;
        run.phase = 'review';
        changed.add('plan');
        changed.add('status');
      }
      a.doing = entry.error ? 'could not draft a plan' : 'plan ready';
      break;
    case 'web_search': {
      a.searches += 1;
      const hits = Array.isArray(raw.hits) ? raw.hits : [];
      for (const hit of hits) {
        if (!hit || !hit.url) continue;
        const s = source(run, hit.url);
        if (!s.title) s.title = hit.title || '';
        if (!s.snippet) s.snippet = hit.snippet || '';
        if (!s.query) s.query = kw.query || '';
      }
      a.doing = `searched “${kw.query || ''}”: ${hits.length} results`;
      changed.add('sources');
      break;
    }
    case 'fetch_url': {
      const url = kw.url || raw.url;
      if (!url) break;
      const s = source(run, url);
      if (entry.error) {
        s.status = 'failed';
        s.error = entry.text;
        a.failed += 1;
      } else {
        s.status = 'read';
        s.error = null;
        if (raw.file_id) s.fileId = raw.file_id;
        if (raw.content_type) s.contentType = raw.content_type;
        a.reads += 1;
        a.doing = `read ${shortUrl(url)}`;
      }
      changed.add('sources');
      break;
    }
    case 'parse_content': {
      const url = kw.url;
      if (!url) break;
      const s = source(run, url);
      if (entry.error) {
        s.status = 'failed';
        s.error = entry.text;
      } else {
        if (raw.title) {
          s.title = raw.title;
          a.doing = `read “${raw.title}”`;
        }
        if (raw.file_id) s.parsedId = raw.file_id;
        if (raw.pages) s.pages = raw.pages;
        if (raw.byline) s.byline = raw.byline;
        if (raw.site_name) s.site = raw.site_name;
        if (raw.published) s.published = raw.published;
      }
      changed.add('sources');
      break;
    }
    case 'update_report':
      if (!entry.error && typeof raw.new_report_markdown === 'string') {
        run.reportMarkdown = raw.new_report_markdown;
        run.reportUpdates += 1;
        run.lastSection = kw.section || null;
        run.phase = 'writing';
        changed.add('report');
        changed.add('status');
      }
      break;
    default:
      break;
  }
}

/** Keeps a decision once (the stream and the saved session both carry it). */
export function addDecision(run, d) {
  if (!d || typeof d !== 'object') return;
  const same = (x) => x.action === d.action && x.at === d.at && x.plan_round === d.plan_round;
  if (!run.decisions.some(same)) run.decisions.push(d);
}

/** The approval of the plan the run went on with, if one is known. */
export function approval(run) {
  return run.decisions.filter((d) => d.action === 'approved').pop() || null;
}

function stop(run, env) {
  const v = env.value || {};
  run.phase = 'done';
  const ended = ['WorkflowCancelledEvent', 'WorkflowFailedEvent', 'WorkflowTimedOutEvent'].includes(env.type);
  for (const a of run.agents.values()) a.doing = ended ? 'stopped' : 'finished';
  switch (env.type) {
    case 'WorkflowCancelledEvent':
      run.status = 'cancelled';
      if (v.by) run.cancelledBy = v.by;
      break;
    case 'WorkflowFailedEvent': {
      run.status = 'failed';
      const ex = v.exception || {};
      run.error = ex.exception_message || 'the run failed';
      if (v.step_name) run.failedStep = v.step_name;
      break;
    }
    case 'WorkflowTimedOutEvent':
      run.status = 'failed';
      run.error = `the run timed out after ${Math.round(v.timeout || 0)} s`;
      break;
    default:
      run.status = 'completed';
      run.result = v;
      if (typeof v.report_markdown === 'string' && v.report_markdown) run.reportMarkdown = v.report_markdown;
      if (v.query && !run.query) run.query = v.query;
      if (v.plan && !run.plan) run.plan = v.plan;
      if (v.plan) run.approvedPlan = v.plan;
  }
}

/**
 * Folds a saved session (the `research-sessions` record) into `run`: what the snapshot knows
 * and the stream may not (settings, each source's status and reason, notes).
 */
export function applySession(run, session) {
  if (!session) return;
  run.session = session;
  if (session.query && !run.query) run.query = session.query;
  const settings = session.settings || {};
  if (typeof settings.require_approval === 'boolean') run.requireApproval = settings.require_approval;
  if (session.plan && !run.plan) {
    run.plan = session.plan;
    run.planRound = Math.max(run.planRound, session.round || 1);
  }
  // Past the gate, the session's plan is the one approved.
  if (session.plan && ['running', 'completed', 'failed'].includes(session.status)) run.approvedPlan = session.plan;
  if (session.report_markdown && !run.reportMarkdown) run.reportMarkdown = session.report_markdown;
  for (const d of session.decisions || []) addDecision(run, d);
  for (const s of session.sources || []) {
    if (!s || !s.url) continue;
    const mine = source(run, s.url);
    if (s.title) mine.title = s.title;
    if (s.snippet && !mine.snippet) mine.snippet = s.snippet;
    if (s.status === 'read' || s.status === 'failed' || mine.status === 'found') mine.status = s.status;
    if (s.error) mine.error = s.error;
    if (s.file_id) mine.fileId = s.file_id;
    if (s.pages) mine.pages = s.pages;
    if (s.byline) mine.byline = s.byline;
    if (s.site_name) mine.site = s.site_name;
    if (s.published) mine.published = s.published;
  }
  for (const art of session.artifacts || []) {
    if (!art || !art.url) continue;
    const mine = run.sources.get(baseUrl(art.url));
    if (!mine) continue;
    if (art.kind === 'raw' && !mine.fileId) mine.fileId = art.file_id;
    if (art.kind === 'parsed' && !mine.parsedId) mine.parsedId = art.file_id;
  }
  const report = (session.artifacts || []).find((a) => a && a.kind === 'report');
  if (report) run.reportFileId = report.file_id;
  if (run.status === 'running' && (session.status === 'completed' || session.status === 'failed')) {
    run.sessionStatus = session.status;
  }
}

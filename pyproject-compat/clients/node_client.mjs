// Runs deep-research on a Fathom server with @llamaindex/workflows-client, unchanged.
//
//     node node_client.mjs ROOT_URL DEPLOYMENT
//
// Starts the run, streams its events over SSE, approves the plan when it arrives and reads the
// completed handler. Prints one JSON summary line; exits non-zero on any mismatch.
import {
  createClient,
  createConfig,
  getEventsByHandlerId,
  getHandlersByHandlerId,
  getWorkflows,
  postEventsByHandlerId,
  postWorkflowsByNameRunNowait,
} from "@llamaindex/workflows-client";

const QUESTION = "How does ownership work in Rust?";
const [root, deployment] = process.argv.slice(2);
const client = createClient(createConfig({ baseUrl: `${root}/deployments/${deployment}` }));

function check(cond, what) {
  if (!cond) throw new Error(`check failed: ${what}`);
}

const timer = setTimeout(() => {
  console.error("timed out");
  process.exit(2);
}, 120_000);

const workflows = await getWorkflows({ client, throwOnError: true });
check(workflows.data.workflows.includes("deep-research"), JSON.stringify(workflows.data));

const started = await postWorkflowsByNameRunNowait({
  client,
  path: { name: "deep-research" },
  body: { start_event: { query: QUESTION } },
  throwOnError: true,
});
const id = started.data.handler_id;
check(started.data.status === "running", JSON.stringify(started.data));

const { stream } = await getEventsByHandlerId({
  client,
  path: { handler_id: id },
  query: { sse: true },
  sseMaxRetryAttempts: 3,
});
const types = [];
let approved = false;
let result = null;
for await (const ev of stream) {
  types.push(ev.type);
  if (ev.type === "ToolCallResult" && ev.value.tool_name === "decompose_query" && !approved) {
    const sent = await postEventsByHandlerId({
      client,
      path: { handler_id: id },
      body: { event: { type: "ApproveEvent", value: { approved: true, feedback: null } } },
      throwOnError: true,
    });
    check(sent.data.status === "sent", JSON.stringify(sent.data));
    approved = true;
  }
  if (ev.type === "StopEvent" || (ev.types ?? []).includes("StopEvent")) {
    result = ev.value;
    break;
  }
}
check(approved, `the plan arrived: ${types}`);
check(result && result.status === "completed", JSON.stringify(result));
check(result.report_markdown.includes("[1]"), "the report cites its sources");
check(result.sources.length > 0, "sources listed");

const handler = await getHandlersByHandlerId({ client, path: { handler_id: id }, throwOnError: true });
check(handler.data.status === "completed", JSON.stringify(handler.data));
clearTimeout(timer);
console.log(
  JSON.stringify({ client: "node", handler_id: id, events: types.length, sources: result.sources.length }),
);

"""Runs deep-research on a Fathom server with the Python clients, unchanged.

    python python_clients.py ROOT_URL DEPLOYMENT

`llama-agents-client`'s WorkflowClient starts the run, streams its events, approves the plan
when it arrives and reads the completed handler; the `llama-cloud` SDK's agent-data client
then finds the saved session and reads it back. Prints one JSON summary line; exits non-zero
on any mismatch.
"""

import asyncio
import json
import sys

from llama_agents.client import WorkflowClient
from llama_cloud import AsyncLlamaCloud

QUESTION = "How does ownership work in Rust?"


def check(cond, what):
    if not cond:
        raise AssertionError(what)


async def main(root: str, deployment: str) -> dict:
    client = WorkflowClient(base_url=f"{root}/deployments/{deployment}")
    health = await client.is_healthy()
    check(health.status == "healthy", f"health: {health}")
    workflows = await client.list_workflows()
    check("deep-research" in workflows.workflows, f"workflows: {workflows}")

    handler = await client.run_workflow_nowait(
        "deep-research", start_event={"query": QUESTION}
    )
    handler_id = handler.handler_id
    check(handler.status == "running", f"started: {handler}")

    stream = client.get_workflow_events(handler_id)
    types, sequences, result, approved = [], [], None, False
    async for event in stream:
        types.append(event.type)
        sequences.append(stream.last_sequence)
        value = event.value
        if (
            event.type == "ToolCallResult"
            and value["tool_name"] == "decompose_query"
            and not approved
        ):
            sent = await client.send_event(
                handler_id, {"type": "ApproveEvent", "value": {"approved": True}}
            )
            check(sent.status == "sent", f"send_event: {sent}")
            approved = True
        if event.type == "ResearchResult":
            result = value
    check(approved, f"the plan arrived: {types}")
    check(sequences == list(range(len(sequences))), f"ids in order: {sequences}")
    check(result is not None and result["status"] == "completed", f"result: {result}")
    check("[1]" in result["report_markdown"], "the report cites its sources")
    check(len(result["sources"]) > 0, "sources listed")

    done = await client.get_handler(handler_id)
    check(done.status == "completed", f"handler: {done}")
    listed = await client.get_handlers(status=["completed"], workflow_name=["deep-research"])
    check(any(h.handler_id == handler_id for h in listed.handlers), "listed as completed")

    meta = await client.run_workflow("research-metadata")
    collection = meta.result.value["research_collection"]

    cloud = AsyncLlamaCloud(api_key="unused-locally", base_url=root)
    sessions = []
    async for item in cloud.beta.agent_data.search(
        deployment_name="_public",
        collection=collection,
        filter={"research_id": {"eq": handler_id}},
        page_size=5,
    ):
        sessions.append(item)
    check(len(sessions) == 1, f"one saved session: {sessions}")
    saved = await cloud.beta.agent_data.get(sessions[0].id)
    check(saved.data["status"] == "completed", f"saved: {saved.data.get('status')}")
    check(
        saved.data["report_markdown"] == result["report_markdown"],
        "the saved report is the streamed one",
    )
    return {
        "client": "python",
        "handler_id": handler_id,
        "events": len(types),
        "sources": len(result["sources"]),
        "session_item": saved.id,
    }


if __name__ == "__main__":
    summary = asyncio.run(asyncio.wait_for(main(sys.argv[1], sys.argv[2]), timeout=120))
    print(json.dumps(summary))

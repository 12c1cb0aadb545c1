"""The Python baseline for Fathom's load benchmark: `llama-agents-server` serving a workflow
of deep-research's shape, with no network and no real work.

    python python_baseline_server.py --port P --db FILE --pre N --pre-bytes B \
        --post N --post-bytes B --result-bytes B

Six steps with deep-research's names; `draft_plan` streams `--pre` events, `await_approval`
waits for an `ApproveEvent`, and the four steps after it stream `--post` events between them;
each event carries a text of the given size, and the result a report of `--result-bytes`. The
benchmark measures the counts and sizes on a Fathom run first, so both servers stream the same.
"""

import argparse
import asyncio

from llama_agents.server import SqliteWorkflowStore, WorkflowServer
from workflows import Context, Workflow, step
from workflows.events import Event, HumanResponseEvent, StartEvent, StopEvent


class Progress(Event):
    text: str


class ApproveEvent(HumanResponseEvent):
    approved: bool
    feedback: str | None = None


class PlanDrafted(Event):
    pass


class PlanApproved(Event):
    pass


class SourcesFound(Event):
    pass


class SourcesParsed(Event):
    pass


class ReportWritten(Event):
    pass


class ResearchResult(StopEvent):
    research_id: str
    status: str
    report_markdown: str


def shaped_workflow(pre: int, pre_bytes: int, post: int, post_bytes: int, result_bytes: int):
    pre_text = "p" * pre_bytes
    post_text = "q" * post_bytes
    # The post-gate events, spread over the four steps after the gate.
    shares = [post // 4 + (1 if i < post % 4 else 0) for i in range(4)]

    class DeepResearch(Workflow):
        @step
        async def draft_plan(self, ctx: Context, ev: StartEvent) -> PlanDrafted:
            for _ in range(pre):
                ctx.write_event_to_stream(Progress(text=pre_text))
            return PlanDrafted()

        @step
        async def await_approval(self, ctx: Context, ev: PlanDrafted) -> PlanApproved:
            decision = await ctx.wait_for_event(ApproveEvent)
            assert decision.approved
            return PlanApproved()

        @step
        async def run_web_research(self, ctx: Context, ev: PlanApproved) -> SourcesFound:
            for _ in range(shares[0]):
                ctx.write_event_to_stream(Progress(text=post_text))
            return SourcesFound()

        @step
        async def fetch_parse_sources(self, ctx: Context, ev: SourcesFound) -> SourcesParsed:
            for _ in range(shares[1]):
                ctx.write_event_to_stream(Progress(text=post_text))
            return SourcesParsed()

        @step
        async def synthesize_and_patch(self, ctx: Context, ev: SourcesParsed) -> ReportWritten:
            for _ in range(shares[2]):
                ctx.write_event_to_stream(Progress(text=post_text))
            return ReportWritten()

        @step
        async def persist_session(self, ctx: Context, ev: ReportWritten) -> ResearchResult:
            for _ in range(shares[3]):
                ctx.write_event_to_stream(Progress(text=post_text))
            return ResearchResult(
                research_id="baseline", status="completed", report_markdown="r" * result_bytes
            )

    return DeepResearch(timeout=600)


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--db", required=True)
    for name in ("pre", "pre-bytes", "post", "post-bytes", "result-bytes"):
        p.add_argument(f"--{name}", type=int, required=True)
    a = p.parse_args()
    server = WorkflowServer(workflow_store=SqliteWorkflowStore(a.db))
    server.add_workflow(
        "deep-research",
        shaped_workflow(a.pre, a.pre_bytes, a.post, a.post_bytes, a.result_bytes),
        additional_events=[ApproveEvent],
    )
    print(f"baseline serving on http://127.0.0.1:{a.port}", flush=True)
    await server.serve(host="127.0.0.1", port=a.port, uvicorn_config={"log_level": "warning"})


if __name__ == "__main__":
    asyncio.run(main())

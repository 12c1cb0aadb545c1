"""Researches through Fathom's MCP tools with the official Python `mcp` client, unchanged.

    python mcp_client.py stdio FATHOM_BINARY ARG...      # starts `fathom ARG...` (e.g. mcp ...)
    python mcp_client.py http URL [API_KEY]              # streamable HTTP, e.g. http://.../mcp

Lists the tools, starts a research (which stops at its plan), approves it, waits for the
report and finds the session again. Prints one JSON summary line; exits non-zero on any
mismatch.
"""

import asyncio
import json
import re
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

QUESTION = "How does ownership work in Rust?"
TOOLS = {"start_research", "review_plan", "get_progress", "get_report", "search_sessions"}


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def text_of(result) -> str:
    check(not result.is_error, f"tool failed: {result}")
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


async def research(session: ClientSession) -> dict:
    await session.initialize()
    listed = await session.list_tools()
    names = {t.name for t in listed.tools}
    check(TOOLS <= names, f"tools: {names}")
    start = next(t for t in listed.tools if t.name == "start_research")
    check("question" in start.input_schema.get("properties", {}), f"schema: {start.input_schema}")

    started = text_of(await session.call_tool("start_research", {"question": QUESTION}))
    m = re.search(r"research_id: (\S+)", started)
    check(m is not None, f"no research id in: {started}")
    rid = m.group(1)
    check("status: waiting" in started and "Search queries:" in started, started)

    # A bad call is a tool error the model can read, not a broken session.
    bad = await session.call_tool("get_report", {"research_id": "nope"})
    check(bad.is_error, f"an unknown id is an error: {bad}")

    approved = text_of(await session.call_tool("review_plan", {"research_id": rid}))
    check("Approved" in approved, approved)
    report = text_of(
        await session.call_tool("get_report", {"research_id": rid, "wait_seconds": 120})
    )
    check("## Sources" in report and "[1]" in report, report)
    progress = text_of(await session.call_tool("get_progress", {"research_id": rid}))
    check("completed" in progress, progress)
    found = text_of(await session.call_tool("search_sessions", {"text": "ownership"}))
    check(rid in found, found)
    return {
        "research_id": rid,
        "tools": sorted(names),
        "report_chars": len(report),
        "cited": len(re.findall(r"^\d+\. ", report, re.M)),
    }


async def main(argv: list[str]) -> dict:
    kind = argv[1]
    if kind == "stdio":
        params = StdioServerParameters(command=argv[2], args=argv[3:])
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                return await research(session)
    url = argv[2]
    headers = {"Authorization": f"Bearer {argv[3]}"} if len(argv) > 3 else None
    async with create_mcp_http_client(headers=headers) as http:
        async with streamable_http_client(url, http_client=http) as streams:
            read, write = streams[0], streams[1]
            async with ClientSession(read, write) as session:
                return await research(session)


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv))))

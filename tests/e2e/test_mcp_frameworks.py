"""The MCP server as two agent frameworks see it, without any LLM: LangChain's MCP adapters and the OpenAI Agents
SDK's `MCPServerStdio` each start `noumena mcp` over stdio, list the tools (every one annotated, every parameter
described, every tool named in the instructions) and call each one on the seed's story, names in place of refs;
`find_entities` puts person:wang first for 王总, Wang, wang and a typo; an ambiguous name lists its candidates."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from agents.mcp import MCPServerStdio
from langchain_mcp_adapters.client import MultiServerMCPClient

from api.mcp_server import INSTRUCTIONS
from demo.run import build_story
from demo.story import TENANT
from infra.adapters.api_keys import ApiKeyStore

ROOT = Path(__file__).resolve().parents[2]
TOOLS = {"find_entities", "list_relations", "perspective", "deepen", "context", "recall", "search", "remember",
         "correct", "forget"}


@pytest.fixture
def story_env(tmp_path: Path) -> dict[str, str]:
    """The seed's story in a fresh home, plus a second Wang who is also called 王, and a key for its tenant."""
    home = tmp_path / "home"
    noumena, _clock = build_story(home)
    try:
        noumena.application.facts.register_entity(TENANT, "person:wangfang", "Wang Fang", ["王", "王芳"])
        key = ApiKeyStore(noumena.settings.api_keys_path()).create(TENANT, "frameworks").key
    finally:
        noumena.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("NOUMENA_")}
    return env | {"NOUMENA_HOME": str(home), "NOUMENA_EVENT_STORE": "sqlite", "NOUMENA_API_KEY": key}


def _calls(earlier: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Each tool once, in an order where a later call may use what an earlier one answered (`earlier`)."""
    return [
        ("find_entities", {"name": "王总"}),
        ("list_relations", {}),
        ("perspective", {"agent": "Wang's agent", "serving": "王总", "format": "json"}),
        ("deepen", {"perspective_id": lambda: earlier["perspective"]["perspective_id"]}),
        ("context", {"session_id": "wang-main", "message": "how is contract v3 going?"}),
        ("recall", {"agent": "agent:wang-assistant", "serving": "Wang", "subject": "李总"}),
        ("search", {"agent": "agent:wang-assistant", "serving": "person:wang", "query": "how does Li want to pay"}),
        ("remember", {"subject": "Wang", "relation": "knows", "object": "李总", "reason": "old classmates"}),
        ("correct", {"fact_id": lambda: earlier["remember"]["fact_id"], "reason": "they only met once"}),
        ("forget", {"subject": "memory:quote-failed-fx"}),
    ]


def _arguments(arguments: dict[str, Any]) -> dict[str, Any]:
    return {k: v() if callable(v) else v for k, v in arguments.items()}


def _assert_described(tools: list[Any]) -> None:
    """Every tool: annotated (read-only, destructive, idempotent said), described, named in the instructions;
    every parameter described."""
    assert {t.name for t in tools} == TOOLS
    for tool in tools:
        hints = tool.annotations
        assert hints is not None and None not in (hints.readOnlyHint, hints.destructiveHint, hints.idempotentHint)
        assert tool.description and f"`{tool.name}`" in INSTRUCTIONS
        for name, schema in tool.inputSchema.get("properties", {}).items():
            assert schema.get("description"), (tool.name, name)
    by_name = {t.name: t.annotations for t in tools}
    assert by_name["forget"].destructiveHint and not by_name["forget"].readOnlyHint
    assert by_name["find_entities"].readOnlyHint and by_name["list_relations"].readOnlyHint
    assert not by_name["remember"].readOnlyHint and not by_name["remember"].destructiveHint


async def _through_openai_agents(env: dict[str, str]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    params = {"command": sys.executable, "args": ["-m", "api", "mcp"], "env": env, "cwd": str(ROOT)}
    async with MCPServerStdio(params=params, name="noumena", client_session_timeout_seconds=120) as server:
        seen["tools"] = await server.list_tools()
        for name, arguments in _calls(seen):
            result = await server.call_tool(name, _arguments(arguments))
            assert not result.isError, (name, result.content)
            seen[name] = json.loads(result.content[0].text)
        for text in ("王总", "Wang", "wang", "Wnag"):
            result = await server.call_tool("find_entities", {"name": text})
            seen[f"find {text}"] = json.loads(result.content[0].text)
        seen["ambiguous"] = await server.call_tool("perspective", {"agent": "agent:wang-assistant", "serving": "王"})
        seen["bad"] = await server.call_tool("remember", {"subject": "person:li", "relation": "knows",
                                                          "object": "person:li", "confidence": 2})
        templates = await server.list_resource_templates()
        seen["templates"] = {t.uriTemplate for t in templates.resourceTemplates}
        read = await server.read_resource("noumena://perspective/agent:wang-assistant/王总")
        seen["resource"] = read.contents[0].text
    return seen


def test_the_openai_agents_sdk_lists_and_calls_every_tool(story_env: dict[str, str]) -> None:
    seen = asyncio.run(_through_openai_agents(story_env))
    _assert_described(seen["tools"])
    for text in ("王总", "Wang", "wang", "Wnag"):
        assert seen[f"find {text}"]["entities"][0]["ref"] == "person:wang", (text, seen[f"find {text}"])
    assert seen["perspective"]["items"] and seen["deepen"]["perspective_id"] != seen["perspective"]["perspective_id"]
    assert "contract v3" in seen["context"]["context"]
    assert seen["recall"]["facts"] and all(f["subject"] == "person:li" or f["object"] == "person:li"
                                           for f in seen["recall"]["facts"])
    assert seen["remember"]["change"] == "asserted" and seen["correct"]["change"] == "invalidated"
    assert seen["forget"]["keys_deleted"] >= 1
    relations = {r["name"]: r for r in seen["list_relations"]["relations"]}
    assert relations["works_for"]["functional"] and not relations["knows"]["functional"]
    assert relations["serves"]["current_facts"] >= 1
    ambiguous = seen["ambiguous"]
    assert ambiguous.isError and ambiguous.content[0].text.startswith("serving: '王' may name 2 entities")
    assert "person:wang" in ambiguous.content[0].text and "person:wangfang" in ambiguous.content[0].text
    assert seen["bad"].isError and seen["bad"].content[0].text.startswith("confidence: ")
    assert "fix confidence" in seen["bad"].content[0].text and "\n" not in seen["bad"].content[0].text
    assert {"noumena://perspective/{agent}/{serving}", "noumena://context/{session_id}"} <= seen["templates"]
    assert seen["resource"] and "Li" in seen["resource"]


async def _through_langchain(env: dict[str, str]) -> dict[str, Any]:
    client = MultiServerMCPClient({"noumena": {"transport": "stdio", "command": sys.executable,
                                               "args": ["-m", "api", "mcp"], "env": env, "cwd": str(ROOT)}})
    seen: dict[str, Any] = {}
    async with client.session("noumena") as session:
        from langchain_mcp_adapters.tools import load_mcp_tools

        tools = {tool.name: tool for tool in await load_mcp_tools(session)}
        seen["tools"] = tools
        for name, arguments in _calls(seen):
            answer = await tools[name].ainvoke(_arguments(arguments))
            seen[name] = json.loads(_text(answer))
        seen["ambiguous"] = _text(await tools["recall"].ainvoke({"agent": "agent:wang-assistant", "subject": "王"}))
    return seen


def _text(answer: Any) -> str:
    if isinstance(answer, str):
        return answer
    if isinstance(answer, tuple):
        answer = answer[0]
    if isinstance(answer, list):
        return "".join(part["text"] if isinstance(part, dict) else str(part) for part in answer)
    return str(answer)


def test_langchain_mcp_adapters_list_and_call_every_tool(story_env: dict[str, str]) -> None:
    seen = asyncio.run(_through_langchain(story_env))
    assert set(seen["tools"]) == TOOLS
    for name, tool in seen["tools"].items():
        assert tool.description, name
        assert isinstance(tool.args_schema, dict), name  # (the tool's JSON schema as the server sent it)
        assert all(p.get("description") for p in tool.args_schema.get("properties", {}).values()), name
    assert seen["find_entities"]["entities"][0]["ref"] == "person:wang"
    assert seen["perspective"]["items"] and seen["context"]["context"]
    assert seen["remember"]["change"] == "asserted" and seen["correct"]["change"] == "invalidated"
    assert seen["forget"]["keys_deleted"] >= 1
    assert "subject: '王' may name 2 entities" in seen["ambiguous"]

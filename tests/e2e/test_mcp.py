"""The MCP server over stdio, driven by the official SDK's client: it lists the tools, remembers and corrects
facts with provenance, recalls by tier, and serves a perspective, a deeper one, and forgets for real."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from domain.commands import CreateTenant
from infra.adapters.api_keys import ApiKeyStore
from infra.bootstrap import bootstrap
from infra.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def mcp_home(tmp_path: Path) -> tuple[Path, str]:
    """A home with tenant `acme` and an API key for it (the entities arrive through `remember`)."""
    settings = Settings(home=tmp_path / "home", event_store="sqlite")
    noumena = bootstrap(settings)
    try:
        noumena.service.execute(CreateTenant(tenant="acme"))
        key = ApiKeyStore(settings.api_keys_path()).create("acme", "mcp test").key
    finally:
        noumena.close()
    return settings.home, key


def _data(result: Any) -> dict[str, Any]:
    assert not result.isError, result.content
    if result.structuredContent is not None:
        return dict(result.structuredContent.get("result", result.structuredContent))
    return dict(json.loads(result.content[0].text))


async def _conversation(home: Path, key: str) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NOUMENA_")}
    env |= {"NOUMENA_HOME": str(home), "NOUMENA_EVENT_STORE": "sqlite", "NOUMENA_API_KEY": key}
    params = StdioServerParameters(command=sys.executable, args=["-m", "api", "mcp"], env=env, cwd=str(ROOT))
    seen: dict[str, Any] = {}
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        seen["tools"] = sorted(tool.name for tool in (await session.list_tools()).tools)
        call = session.call_tool
        seen["serves"] = _data(await call("remember", {
            "subject": "agent:wang-assistant", "relation": "serves", "object": "person:wang",
            "subject_label": "Wang's assistant", "object_label": "Wang"}))
        seen["knows"] = _data(await call("remember", {
            "subject": "person:wang", "relation": "knows", "object": "person:li", "reason": "old classmates",
            "object_label": "Li",
            "session_id": None, "message_ids": ["m1"], "actor": "agent:wang-assistant"}))
        seen["prefers"] = _data(await call("remember", {
            "subject": "person:li", "relation": "prefers", "object": "memory:li-monthly", "confidence": 0.9,
            "object_label": "Li prefers monthly settlement",
            "reason": "said so on the third call", "scope": "person:wang", "actor": "agent:wang-assistant"}))
        seen["new_entity"] = _data(await call("remember", {
            "subject": "person:li", "relation": "works_for", "object": "org:acme-trading",
            "object_label": "ACME Trading", "reason": "business card"}))
        seen["correct"] = _data(await call("correct", {"fact_id": seen["new_entity"]["fact_id"],
                                                      "reason": "moved to another firm"}))
        seen["bad"] = await call("remember", {"subject": "person:li", "relation": "knows", "object": "person:ghost"})
        seen["recall"] = _data(await call("recall", {"agent": "agent:wang-assistant", "serving": "person:wang",
                                                     "subject": "person:li"}))
        seen["search"] = _data(await call("search", {"agent": "agent:wang-assistant", "serving": "person:wang",
                                                     "query": "how does Li want to pay"}))
        seen["perspective"] = _data(await call("perspective", {"agent": "agent:wang-assistant",
                                                               "serving": "person:wang", "format": "json"}))
        seen["deeper"] = _data(await call("deepen", {"perspective_id": seen["perspective"]["perspective_id"]}))
        seen["forget"] = _data(await call("forget", {"subject": "memory:li-monthly"}))
        seen["after"] = _data(await call("perspective", {"agent": "agent:wang-assistant", "serving": "person:wang"}))
        seen["search_after"] = _data(await call("search", {"agent": "agent:wang-assistant", "serving": "person:wang",
                                                           "query": "monthly settlement"}))
    return seen


def test_the_sdk_client_lists_the_tools_remembers_recalls_and_gets_a_perspective(mcp_home: tuple[Path, str]
                                                                                 ) -> None:
    seen = asyncio.run(_conversation(*mcp_home))
    assert {"perspective", "deepen", "remember", "correct", "recall", "search", "forget"} <= set(seen["tools"])
    assert seen["search"]["items"][0]["fact_id"] == seen["prefers"]["fact_id"]
    assert seen["search"]["answered_by"] == "episodic" and seen["search"]["search_id"].startswith("srch-")
    assert all("monthly settlement" not in item["text"] for item in seen["search_after"]["items"])
    assert seen["knows"]["change"] == "asserted" and seen["knows"]["position"] > 0
    assert seen["correct"]["change"] == "invalidated"
    assert seen["bad"].isError and "object" in seen["bad"].content[0].text
    assert seen["recall"]["answered_by"] == "episodic"
    assert seen["recall"]["facts"][0]["fact_id"] == seen["prefers"]["fact_id"]
    perspective = seen["perspective"]
    shown = {item["fact_id"] for item in perspective["items"]}
    assert {seen["knows"]["fact_id"], seen["prefers"]["fact_id"]} <= shown
    assert seen["new_entity"]["fact_id"] not in shown  # corrected: never in a current perspective
    assert "Li" in perspective["context"] and perspective["counts"]["full"] >= 2
    assert seen["deeper"]["perspective_id"] != perspective["perspective_id"]
    assert seen["forget"]["keys_deleted"] >= 1
    assert "monthly settlement" in perspective["context"] and "monthly settlement" not in seen["after"]["context"]


def test_an_unknown_key_is_refused_before_serving(tmp_path: Path) -> None:
    import subprocess

    env = {k: v for k, v in os.environ.items() if not k.startswith("NOUMENA_")}
    env |= {"NOUMENA_HOME": str(tmp_path), "NOUMENA_API_KEY": "nk_000000000000_nope"}
    done = subprocess.run([sys.executable, "-m", "api", "mcp"], env=env, cwd=ROOT, capture_output=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 2 and b"unknown or revoked API key" in done.stderr


async def _hostile_conversation(home: Path, key: str) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NOUMENA_")}
    env |= {"NOUMENA_HOME": str(home), "NOUMENA_EVENT_STORE": "sqlite", "NOUMENA_API_KEY": key}
    params = StdioServerParameters(command=sys.executable, args=["-m", "api", "mcp"], env=env, cwd=str(ROOT))
    seen: dict[str, Any] = {}
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        call = session.call_tool
        seen["remember"] = await call("remember", {"subject": "agent:a", "relation": "serves", "object": "person:li",
                                                   "subject_label": "A", "object_label": "Li"})
        seen["recall_relation"] = await call("recall", {"agent": "agent:a", "subject": "person:li",
                                                        "relation": "serves\n"})
        seen["newline"] = await call("remember", {"subject": "person:li\n", "relation": "knows", "object": "agent:a"})
        seen["coerced"] = await call("remember", {"subject": "person:li", "relation": "knows", "object": "agent:a",
                                                  "confidence": True})
        seen["unknown_perspective"] = await call("deepen", {"perspective_id": "p-none"})
        seen["correct_nothing"] = await call("correct", {"reason": "wrong"})
        seen["bad_date"] = await call("correct", {"reason": "wrong", "fact_id": "f1", "valid_to": "yesterday"})
        seen["epoch"] = await call("perspective", {"agent": "agent:a", "as_of": 1700000000})
        seen["before_revoke"] = await call("perspective", {"agent": "agent:a", "serving": "person:li"})
        ApiKeyStore(home / "api_keys.json").revoke(key.split("_")[1])
        seen["after_revoke"] = await call("perspective", {"agent": "agent:a", "serving": "person:li"})
        seen["remember_after_revoke"] = await call("remember", {"subject": "agent:a", "relation": "knows",
                                                                "object": "person:li"})
    return seen


def _error(result: Any) -> str:
    assert result.isError, result.content
    return str(result.content[0].text)


def test_mcp_checks_the_key_on_every_call_and_errors_name_the_field(mcp_home: tuple[Path, str]) -> None:
    home, key = mcp_home
    seen = asyncio.run(_hostile_conversation(home, key))
    assert not seen["remember"].isError
    assert "relation" in _error(seen["recall_relation"])
    assert "subject" in _error(seen["newline"]) and "confidence" in _error(seen["coerced"])
    assert "perspective_id" in _error(seen["unknown_perspective"])
    assert "fact_id" in _error(seen["correct_nothing"])
    assert "valid_to" in _error(seen["bad_date"])
    assert "as_of" in _error(seen["epoch"])
    assert not seen["before_revoke"].isError
    assert "revoked" in _error(seen["after_revoke"]) and "revoked" in _error(seen["remember_after_revoke"])


async def _scoped_conversation(home: Path, tenant_key: str, scoped_key: str) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NOUMENA_")}
    env |= {"NOUMENA_HOME": str(home), "NOUMENA_EVENT_STORE": "sqlite"}
    seen: dict[str, Any] = {}
    for name, key in (("tenant", tenant_key), ("scoped", scoped_key)):
        params = StdioServerParameters(command=sys.executable, args=["-m", "api", "mcp"],
                                       env=env | {"NOUMENA_API_KEY": key}, cwd=str(ROOT))
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            call = session.call_tool
            if name == "tenant":
                for subject, person in (("agent:a", "person:li"), ("agent:b", "person:wang")):
                    _data(await call("remember", {"subject": subject, "relation": "serves", "object": person,
                                                  "subject_label": subject, "object_label": person}))
                continue
            seen["own"] = await call("perspective", {"agent": "agent:a", "serving": "person:li"})
            seen["other_agent"] = await call("perspective", {"agent": "agent:b", "serving": "person:wang"})
            seen["other_person"] = await call("recall", {"agent": "agent:a", "serving": "person:wang",
                                                         "subject": "person:wang"})
            seen["widen"] = await call("remember", {"subject": "agent:a", "relation": "serves",
                                                    "object": "person:wang"})
            seen["forget"] = await call("forget", {"subject": "person:wang"})
    return seen


def test_mcp_with_an_agent_scoped_key_serves_only_its_agents_and_their_persons(mcp_home: tuple[Path, str]) -> None:
    home, key = mcp_home
    scoped = ApiKeyStore(home / "api_keys.json").create("acme", "agent a", ("agent:a",)).key
    seen = asyncio.run(_scoped_conversation(home, key, scoped))
    assert not seen["own"].isError, seen["own"].content
    assert _error(seen["other_agent"]).startswith("agent: this key acts only as agent:a")
    assert _error(seen["other_person"]).startswith("serving: person:wang is not served")
    assert _error(seen["widen"]).startswith("relation: a 'serves' fact")
    assert "tenant-wide" in _error(seen["forget"])

"""Generate noumena_client/aio.py (AsyncNoumena) from noumena_client/client.py (Noumena), so the two clients
never drift: `python scripts/unasync.py` writes it, `--check` fails when the file on disk differs."""

from __future__ import annotations

import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1] / "noumena_client"
REPLACEMENTS = [
    ('"""The synchronous client (`Noumena`). `aio.py`\'s `AsyncNoumena` is generated from this file\n'
     '(`python scripts/unasync.py`): change this one."""',
     '"""The asynchronous client (`AsyncNoumena`), GENERATED from client.py by scripts/unasync.py: do not edit."""'),
    ("import threading\nimport time\n", "import asyncio\nimport threading\n"),
    ("class Noumena:", "class AsyncNoumena:"),
    ("http: httpx.Client | None", "http: httpx.AsyncClient | None"),
    ("httpx.Client(", "httpx.AsyncClient("),
    ("    def close(self) -> None:\n        self._http.close()",
     "    async def close(self) -> None:\n        await self._http.aclose()"),
    ("    def __enter__(self) -> Noumena:", "    async def __aenter__(self) -> AsyncNoumena:"),
    ("    def __exit__(self, *_: object) -> None:\n        self.close()",
     "    async def __aexit__(self, *_: object) -> None:\n        await self.close()"),
    ("response = self._http.request(", "response = await self._http.request("),
    ("time.sleep(", "await asyncio.sleep("),
    ("return self._send(", "return await self._send("),
]


def generate() -> str:
    text = (HERE / "client.py").read_text()
    for old, new in REPLACEMENTS:
        if old not in text:
            raise SystemExit(f"unasync: {old!r} is no longer in client.py; update scripts/unasync.py")
        text = text.replace(old, new)
    # every method whose body awaits becomes a coroutine
    lines = text.split("\n")
    starts = [i for i, line in enumerate(lines) if re.match(r"    (async )?def \w+\(", line)] + [len(lines)]
    for begin, end in zip(starts, starts[1:], strict=False):
        if any("await " in line for line in lines[begin:end]) and not lines[begin].startswith("    async def"):
            lines[begin] = lines[begin].replace("    def ", "    async def ", 1)
    return "\n".join(lines)

if __name__ == "__main__":
    generated = generate()
    target = HERE / "aio.py"
    if "--check" in sys.argv:
        if target.read_text() != generated:
            raise SystemExit("noumena_client/aio.py is out of date: run python clients/python/scripts/unasync.py")
    else:
        target.write_text(generated)

"""Files and folders noumena writes are private to its user: the event log, the data keys, the API
keys, the read model and the evidence of served perspectives and searches are 0600 in 0700 folders; an existing
home that is too open is reported at start."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

import pytest

from infra.bootstrap import bootstrap
from infra.runtime.private import too_open
from infra.settings import Settings
from tests.api_support import start_server, stop_server


def test_everything_a_serving_home_holds_is_private_to_its_user(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    server = start_server(home)
    try:
        tenant = server.tenant("acme")
        for ref in ("agent:a", "person:li"):
            assert tenant.client.post("/v1/entities", json={"ref": ref, "label": f"{ref} secret"}).status_code == 200
        fact = tenant.client.post("/v1/facts", json={"subject": "agent:a", "relation": "serves",
                                                     "object": "person:li", "reason": "a secret reason"}).json()
        served = tenant.client.get("/v1/perspectives", params={"agent": "agent:a", "serving": "person:li",
                                                               "min_position": fact["position"]})
        assert served.status_code == 200, served.text
        assert tenant.client.post("/v1/search", json={"agent": "agent:a", "query": "secret"}).status_code == 200
    finally:
        stop_server(server)
    written = [p for p in home.rglob("*") if p.name != "server.log"]  # server.log is the test's own file
    names = {p.name for p in written}
    assert {"events.sqlite", "keys.sqlite", "api_keys.json"} <= names, names
    assert any(p.suffix == ".duckdb" for p in written), names
    loose = {str(p.relative_to(home)): stat.filemode(p.stat().st_mode) for p in written
             if p.stat().st_mode & 0o077}
    assert loose == {}, loose
    assert len(written) >= 5


def test_an_existing_home_open_to_others_is_reported_at_start(tmp_path: Path, caplog: pytest.LogCaptureFixture
                                                              ) -> None:
    home = tmp_path / "open-home"
    home.mkdir()
    os.chmod(home, 0o755)
    (home / "events.sqlite").write_bytes(b"")
    os.chmod(home / "events.sqlite", 0o644)
    with caplog.at_level(logging.WARNING, logger="infra.runtime.private"):
        noumena = bootstrap(Settings(home=home, event_store="sqlite"))
        noumena.close()
    warned = [r.getMessage() for r in caplog.records if r.name == "infra.runtime.private"]
    assert len(warned) == 1 and "chmod -R go-rwx" in warned[0] and "events.sqlite" in warned[0]
    assert set(too_open(home)) >= {home, home / "events.sqlite"}
    os.chmod(home, 0o700)
    os.chmod(home / "events.sqlite", 0o600)
    assert too_open(home) == []

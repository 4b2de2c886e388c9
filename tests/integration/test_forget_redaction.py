"""While a served process rebuilds its read model after a forget, the forgetting tenant reads on from the live file
with the forgotten texts blanked in place (projections/purge.py `redact_in_place`). Blanking may take more than
the rebuild does (it is conservative), never less: every text the rebuilt file reads as `[forgotten]` reads so in
the redacted file too, and no marker of the forgotten person is left in any text column of the tenant."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from domain import commands as c
from domain.forgetting import FORGOTTEN
from infra.bootstrap import bootstrap
from infra.settings import Settings
from projections.perspective_index import PerspectiveIndex
from projections.perspective_load import from_duckdb, take_texts, texts_now
from projections.projector import Projector
from projections.purge import forgotten_positions, redact_in_place
from projections.replay import replay
from tests.conftest import TickingClock, postgres_settings
from tests.integration.test_forgetting import GONE, KEPT, T, _plant

CONTENT = {  # table -> (its key columns, its text columns)
    "entity_versions": (("ref", "version"), ("label", "aliases")),
    "fact_versions": (("fact_id", "version"), ("reason", "ended_reason")),
    "fact_changes": (("position",), ("reason",)),
    "session_changes": (("position",), ("task", "summary")),
    "sessions": (("session_id",), ("task", "last_summary")),
}


def _texts(con: duckdb.DuckDBPyConnection) -> str:
    """Every text and list of texts of every row of the tenant in every table, as one string."""
    found = []
    tables = [row[0] for row in con.execute(
        "SELECT DISTINCT table_name FROM information_schema.columns WHERE column_name = 'tenant'").fetchall()]
    for table in tables:
        columns = [row[0] for row in con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = ? AND data_type IN"
            " ('VARCHAR', 'VARCHAR[]')", [table]).fetchall()]
        for column in columns:
            found += [str(row[0]) for row in con.execute(
                f"SELECT {column} FROM {table} WHERE tenant = ? AND {column} IS NOT NULL", [T]).fetchall()]
    return "\n".join(found)


def _settings(store: str, home: Path) -> Settings:
    return postgres_settings(home) if store == "postgres" else Settings(home=home, event_store=store)


@pytest.mark.parametrize(("store", "subject"), [("sqlite", "person:zhao"), ("sqlite", "session:s-zhao"),
                                                ("postgres", "person:zhao")])
def test_redacting_the_live_file_blanks_at_least_what_the_rebuild_forgets(tmp_path: Path, store: str,
                                                                          subject: str) -> None:
    app = bootstrap(_settings(store, tmp_path / "home"), clock=TickingClock())
    try:
        _plant(app.service)
        app.service.execute(c.AssertFact(tenant=T, subject="person:qian", relation="prefers",
                                         object="memory:zhao-tea", reason="KEEP-QIAN-OWN", scope="person:qian"))
        with Projector(app.log, tmp_path / "live.duckdb") as live:
            live.catch_up()
            assert all(marker in _texts(live.con) for marker in GONE if marker != "MARKER-ZHAO-MESSAGE")

            app.application.forgetting.forget(T, subject)
            live.catch_up()  # (the live file now has the forget, and still every text it had before)
            positions = forgotten_positions(app.log, app.log.max_position())
            assert positions, "no event reads [forgotten] after the forget"
            redact_in_place(live.con, T, positions)
            live.con.execute("CHECKPOINT")

            rebuilt = replay(app.log, tmp_path / "rebuilt.duckdb").path
            with duckdb.connect(str(rebuilt), read_only=True) as exact:
                for table, (keys, columns) in CONTENT.items():
                    for column in columns:
                        blank = "[]" if column == "aliases" else f"'{FORGOTTEN}'"
                        forgotten = set(exact.execute(f"SELECT {', '.join(keys)} FROM {table} WHERE tenant = ?"
                                                      f" AND {column} = {blank}", [T]).fetchall())
                        shown = set(live.con.execute(f"SELECT {', '.join(keys)} FROM {table} WHERE tenant = ?"
                                                     f" AND {column} IS NOT NULL AND {column} <> {blank}",
                                                     [T]).fetchall())
                        assert not forgotten & shown, (table, column, sorted(forgotten & shown))
                exact_texts = _texts(exact)
            texts = _texts(live.con)
        if subject == "person:zhao":
            assert [marker for marker in GONE if marker in texts] == []
        else:
            assert [m for m in ("MARKER-ZHAO-TASK", "MARKER-ZHAO-SUMMARY", "MARKER-ZHAO-WORKER-REPORT")
                    if m in texts] == []
            assert "MARKER-ZHAO-NAME" in texts  # (a session's forget leaves the person's name)
        # what no forget touched is served as it was
        assert "KEEP-QIAN-NAME" in texts and "KEEP-QIAN-OWN" in texts and "KEEP-ORG-REASON" in texts
        assert all(marker in exact_texts for marker in KEPT)
    finally:
        app.close()


def test_finding_the_forgotten_events_finds_none_before_a_forget(tmp_path: Path) -> None:
    app = bootstrap(Settings(home=tmp_path / "home", event_store="sqlite"), clock=TickingClock())
    try:
        _plant(app.service)
        assert forgotten_positions(app.log, app.log.max_position()) == []
        before = app.log.max_position()
        app.application.forgetting.forget(T, "person:zhao")
        found = forgotten_positions(app.log, app.log.max_position())
        assert found and all(position <= before for position in found)
        assert forgotten_positions(app.log, min(found) - 1) == []  # (`until` bounds the search)
    finally:
        app.close()


def _index_texts(index: PerspectiveIndex) -> tuple[dict[str, str], dict[str, str]]:
    """An index's label of each entity and reason of each fact, by ref and by fact id."""
    return (dict(zip(index.refs, index.labels, strict=True)),
            {index.fact_ids.at(row): index.reasons.get(row) for row in range(index.fact_count)})


def test_a_served_index_takes_the_texts_of_the_redacted_then_the_rebuilt_file_as_a_reload_would(
        tmp_path: Path) -> None:
    """The served process does not load a forgetting tenant's index again (that held the interpreter for seconds):
    it takes only the texts that read otherwise in the live file. Its labels and reasons must then be those a
    reload would give: after the redaction, and again after the rebuilt (exact) file is swapped in."""
    app = bootstrap(Settings(home=tmp_path / "home", event_store="sqlite"), clock=TickingClock())
    try:
        _plant(app.service)
        app.service.execute(c.AssertFact(tenant=T, subject="person:qian", relation="prefers",
                                         object="memory:zhao-tea", reason="KEEP-QIAN-OWN", scope="person:qian"))
        # someone else's words equal to a forgotten text: the redaction blanks them too, the rebuilt file not
        app.service.execute(c.RegisterEntity(tenant=T, ref="memory:qian-tea",
                                             label="MARKER-ZHAO-MEMORY prefers green tea"))
        with Projector(app.log, tmp_path / "live.duckdb") as live:
            live.catch_up()
            index = from_duckdb(live.con, T)  # (as served before the forget)
            assert any("MARKER-ZHAO" in text for part in _index_texts(index) for text in part.values())

            app.application.forgetting.forget(T, "person:zhao")
            live.catch_up()
            redact_in_place(live.con, T, forgotten_positions(app.log, app.log.max_position()))
            take_texts(index, texts_now(live.con, T, index))
            assert _index_texts(index) == _index_texts(from_duckdb(live.con, T))
            assert [m for m in GONE if any(m in text for part in _index_texts(index) for text in part.values())] == []
            assert b"MARKER-ZHAO" not in bytes(index.reasons.blob)  # (gone from memory, not only from answers)
            assert _index_texts(index)[0]["memory:qian-tea"] == FORGOTTEN

            rebuilt = replay(app.log, tmp_path / "rebuilt.duckdb").path
            with duckdb.connect(str(rebuilt), read_only=True) as exact:
                take_texts(index, texts_now(exact, T, index))
                assert _index_texts(index) == _index_texts(from_duckdb(exact, T))
        labels, reasons = _index_texts(index)
        assert "Qian KEEP-QIAN-NAME" in labels.values() and "KEEP-QIAN-OWN" in reasons.values()
        assert labels["memory:qian-tea"] == "MARKER-ZHAO-MEMORY prefers green tea"  # (blanked, then given back)
    finally:
        app.close()

"""The serving process's state is the log's, whatever runs beside it: writes through `noumena serve` interleaved
with CLI writers (`noumena import`, `noumena used`), state snapshots taken by another process from the log, and
restarts (clean or killed), on SQLite and PostgreSQL, with state snapshots taken every few events so that the
served state is read from snapshots bucket by bucket, brought forward by delta files. The snapshot's files are
damaged too, as a crash or an operator could: the snapshotter killed while it writes a delta, a delta torn, one put
back after it was merged into the snapshot (older than it), one of a state no chain reaches (newer, after a gap).

After every step the served process is compared with a fresh fold of the log made here: every session, entity,
current fact and seen event id the fold holds, the served state holds too (the rules would decide otherwise: a
context refused, an entity registered again, a fact unknown, an event stored twice), and its read side (DuckDB and
the indexes) lists the same entities and current facts. Every write acknowledged by the served process is read
back at once, without `min_position`.

Hypothesis draws the steps; one served process lives through all examples (a restart is a step), so an example
costs its steps, not a start."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from infra.bootstrap import bootstrap
from infra.settings import Settings
from tests.api_support import ROOT, Server, start_server, stop_server
from tests.conftest import postgres_settings
from tests.history_support import AGENT, history
from tests.properties import examples

TENANT = "acme"
EVERY = 40
"""State snapshots every this many events (the default is 10,000): snapshots are taken, and read on demand, all
the time."""
STEPS = ("serve", "serve", "import", "used", "snapshotter", "restart", "kill", "kill_snapshotter", "tear_delta",
         "stale_delta", "gap_delta")


class SnapshotFiles:
    """The tenant's snapshot files, damaged as a crash or an operator could; the served process is then killed or
    restarted by the world, so that it reads them."""

    def __init__(self, folder: Path, chance: random.Random) -> None:
        self.folder = folder
        self.random = chance
        self.kept: dict[str, bytes] = {}
        """Delta files seen, by name (put back later, once merged into the snapshot)."""

    def deltas(self) -> list[Path]:
        found = sorted(self.folder.glob(f"{TENANT}.snapshot.*.delta"))
        for delta in found:
            try:
                self.kept.setdefault(delta.name, delta.read_bytes())
            except FileNotFoundError:
                continue  # (merged meanwhile)
        return found

    def tear(self) -> None:
        """The newest delta torn (a disk that lost its end)."""
        found = self.deltas()
        if found:
            data = found[-1].read_bytes()
            found[-1].write_bytes(data[: self.random.randrange(len(data))])

    def put_back_stale(self) -> None:
        """A delta seen before put back (from a backup): older than the snapshot once it was merged into it, or of
        an earlier lineage."""
        if self.kept:
            name = self.random.choice(sorted(self.kept))
            (self.folder / name).write_bytes(self.kept[name])

    def move_past_a_gap(self) -> None:
        """A delta renamed as if written by a state at a version no chain reaches (newer than the snapshot, after a
        gap)."""
        found = self.deltas()
        if found:
            _, _, version = found[-1].name.split(".")[-2].partition("-")
            found[-1].rename(found[-1].with_name(f"{TENANT}.snapshot.{int(version) + 1}-{int(version) + 9}.delta"))


class World:
    """The served process, its home and log, what was written, and the steps."""

    def __init__(self, root: Path, backend: str) -> None:
        self.home = root / "home"
        self.home.mkdir(parents=True)
        self.env = {"NOUMENA_STATE_SNAPSHOT_EVERY": str(EVERY), "NOUMENA_EVENT_STORE": backend}
        if backend == "postgres":
            pg = postgres_settings(root / "unused")
            self.env |= {"NOUMENA_PG_HOST": pg.pg_host, "NOUMENA_PG_PORT": str(pg.pg_port),
                         "NOUMENA_PG_USER": pg.pg_user, "NOUMENA_PG_PASSWORD": pg.pg_password.get_secret_value(),
                         "NOUMENA_PG_DBNAME": pg.pg_dbname, "NOUMENA_PG_SCHEMA": pg.pg_schema}
        self.settings = Settings(home=self.home, event_store=backend, state_snapshot_every=0,  # (a fresh fold)
                                 **({"pg_schema": self.env["NOUMENA_PG_SCHEMA"]} if backend == "postgres" else {}))
        self.sent: dict[str, dict[str, Any]] = {}
        """Every envelope acknowledged, by event id."""
        self.rounds = 0
        self.random = random.Random(7)
        self.files = SnapshotFiles(self.home / "state", self.random)
        self.cli("tenant", "create", TENANT)
        self.key = self.cli("keys", "create", "--tenant", TENANT)
        self.import_envelopes(history(TENANT, 600, seed=3))
        self.server: Server = self.start()

    # ------------------------------------------------------------------ processes

    def cli(self, *args: str) -> str:
        env = {k: v for k, v in os.environ.items() if not k.startswith("NOUMENA_")}
        env |= {"NOUMENA_HOME": str(self.home), "NOUMENA_KAFKA_BOOTSTRAP": ""} | self.env
        done = subprocess.run([sys.executable, "-m", "api", *args], env=env, cwd=ROOT, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, f"noumena {' '.join(args)}: {done.stdout}\n{done.stderr}"
        return done.stdout.strip()

    def start(self) -> Server:
        return start_server(self.home, **self.env)

    def client(self) -> httpx.Client:
        return self.server.client(self.key)

    def import_envelopes(self, envelopes: list[dict[str, Any]]) -> None:
        source = self.home.parent / f"import-{uuid.uuid4().hex[:8]}.jsonl"
        source.write_text("".join(json.dumps(e) + "\n" for e in envelopes), encoding="utf-8")
        self.cli("import", str(source))
        self.sent |= {e["event_id"]: e for e in envelopes}

    # ------------------------------------------------------------------ steps

    def step(self, name: str) -> None:
        getattr(self, f"_step_{name}")()
        self.check()

    def new_round(self, prefix: str) -> tuple[str, list[dict[str, Any]]]:
        """A new session of the agent serving a person, a memory, a fact about it from the session's message."""
        self.rounds += 1
        n, person = self.rounds, f"person:p{self.random.randrange(20)}"
        session, memory = f"{prefix}{n}", f"memory:{prefix}{n}"
        envelopes = [
            {"type": "session.started", "payload": {"session_id": session, "agent": AGENT, "serving": person}},
            {"type": "message.appended", "payload": {"session_id": session, "message_id": f"{session}-m1",
                                                     "role": "user", "content": f"I like topic{prefix}{n}"}},
            {"type": "entity.registered", "payload": {"ref": memory, "label": f"likes topic{prefix}{n}"}},
            {"type": "fact.asserted", "payload": {"subject": person, "relation": "likes", "object": memory,
                                                  "reason": f"said in {session}", "scope": person,
                                                  "source": {"session_id": session,
                                                             "message_ids": [f"{session}-m1"]}}},
        ]
        return session, [{"event_id": f"{session}-{i}", "tenant": TENANT, **e} for i, e in enumerate(envelopes)]

    def _step_serve(self) -> None:
        """Writes through the served process, each read back at once: the session's context (with a message, so
        the indexes are asked too), the entity, a search that must find the fact."""
        with self.client() as c:
            for _ in range(self.random.randint(1, 3)):
                session, envelopes = self.new_round("h")
                wrote = c.post("/v1/events", json={"events": envelopes})
                assert wrote.status_code == 200 and wrote.json()["position"], wrote.text
                self.sent |= {e["event_id"]: e for e in envelopes}
                person, memory = envelopes[0]["payload"]["serving"], envelopes[2]["payload"]["ref"]
                context = c.post(f"/v1/sessions/{session}/context", json={"message": f"about topic{memory[7:]}"})
                assert context.status_code == 200, context.text
                entity = c.get(f"/v1/entities/{memory}")
                assert entity.status_code == 200, entity.text
                found = c.post("/v1/search", json={"agent": AGENT, "serving": person, "session_id": session,
                                                   "query": f"topic{memory[7:]}", "about": [memory]})
                assert found.status_code == 200 and [i["object"] for i in found.json()["items"]] == [memory], \
                    found.text

    def _step_import(self) -> None:
        """A CLI import beside the server: new rounds, and repeats of envelopes stored before."""
        envelopes = [e for _ in range(self.random.randint(1, 4)) for e in self.new_round("i")[1]]
        envelopes += self.random.sample(sorted(self.sent.values(), key=lambda e: e["event_id"]), 5)
        self.import_envelopes(envelopes)

    def _step_used(self) -> None:
        """A CLI writer beside the server: `noumena used` on facts of the log."""
        facts = sorted(self.fold()["facts"])
        self.cli("used", "--tenant", TENANT, "--agent", AGENT, *self.random.sample(facts, min(3, len(facts))))

    def _step_snapshotter(self) -> None:
        """Another process folds the log and stores the tenant's state snapshot (what the snapshotter does)."""
        code = ("import sys; from infra.bootstrap import bootstrap; from infra.settings import Settings; "
                "from infra.adapters.state_snapshots import FileStateSnapshots\n"
                "n = bootstrap(Settings())\n"
                f"print(FileStateSnapshots(n.settings.home, n.log, n.log.keys, {EVERY}).take_from_log({TENANT!r}))\n"
                "n.close()")
        env = {k: v for k, v in os.environ.items() if not k.startswith("NOUMENA_")}
        env |= {"NOUMENA_HOME": str(self.home)} | self.env
        done = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr

    def _step_kill_snapshotter(self) -> None:
        """The served process's snapshotter killed (SIGKILL) wherever it is: folding, or writing a delta or a
        merge. A request beside a stream of writes starts it; it is killed a moment after."""
        with self.client() as c:
            for _ in range(3):
                _, envelopes = self.new_round("k")
                wrote = c.post("/v1/events", json={"events": envelopes})
                assert wrote.status_code == 200, wrote.text
                self.sent |= {e["event_id"]: e for e in envelopes}
        listed = subprocess.run(["ps", "-o", "pid=,args=", "--ppid", str(self.server.process.pid)],
                                capture_output=True, text=True, check=False).stdout
        for line in listed.splitlines():
            if "state_snapshotter" in line:
                time_to_kill = self.random.choice([0.0, 0.05, 0.2, 0.5])
                subprocess.run(["sleep", str(time_to_kill)], check=True)
                os.kill(int(line.split()[0]), signal.SIGKILL)

    def _step_tear_delta(self) -> None:
        self.files.tear()
        self._step_kill()

    def _step_stale_delta(self) -> None:
        self.files.put_back_stale()
        self._step_restart()

    def _step_gap_delta(self) -> None:
        self.files.move_past_a_gap()
        self._step_kill()

    def _step_restart(self) -> None:
        stop_server(self.server)
        self.server = self.start()

    def _step_kill(self) -> None:
        self.server.process.send_signal(signal.SIGKILL)
        self.server.process.wait()
        self.server = self.start()

    # ------------------------------------------------------------------ the comparison

    def fold(self) -> dict[str, Any]:
        """The tenant's state folded afresh from the whole log, in this process."""
        noumena = bootstrap(self.settings)
        try:
            state = noumena.service.ontology(TENANT)
            return {"sessions": set(state.sessions),
                    "entities": {ref: e.label for ref, e in state.entities.items() if e.merged_into is None},
                    "facts": {fact_id for fact_id, f in state.facts.items() if str(f.status) == "current"},
                    "seen": set(state.seen_event_ids), "version": state.version}
        finally:
            noumena.close()

    def check(self) -> None:
        fold = self.fold()
        assert set(self.sent) <= fold["seen"], "every acknowledged envelope is in the log"
        with self.client() as c:
            # the rules' state: an event id it has seen is a repeat (nothing written) ...
            repeats = self.random.sample(sorted(self.sent), min(300, len(self.sent)))
            again = c.post("/v1/events", json={"events": [self.sent[i] for i in repeats]})
            assert again.status_code == 200 and again.json()["position"] is None, again.text
            # ... an entity it knows is a no-op to register again with its label ...
            probes = [{"event_id": f"probe-{uuid.uuid4().hex}", "tenant": TENANT, "type": "entity.registered",
                       "payload": {"ref": ref, "label": label}} for ref, label in sorted(fold["entities"].items())]
            registered = c.post("/v1/events", json={"events": probes})
            assert registered.status_code == 200 and registered.json()["position"] is None, registered.text
            # ... every current fact is one it knows (a use of each is recorded) ...
            used = c.post("/v1/memory/used", json={"agent": AGENT, "fact_ids": sorted(fold["facts"])[:1000]})
            assert used.status_code == 200, used.text
            # ... and every session is one it serves a context for, the indexes included (a message searches)
            for session in sorted(fold["sessions"]):
                context = c.post(f"/v1/sessions/{session}/context", json={"message": "what now?"})
                assert context.status_code == 200, f"{session}: {context.text}"
            # the read side lists what the fold holds
            assert _paged(c, "/v1/entities", {"q": ""}, "ref") == set(fold["entities"])
            assert _paged(c, "/v1/graph", {}, "fact_id") == fold["facts"]


def _paged(c: httpx.Client, route: str, params: dict[str, Any], key: str) -> set[str]:
    seen: set[str] = set()
    skip = 0
    while True:
        page = c.get(route, params={**params, "skip": skip, "limit": 1000})
        assert page.status_code == 200, page.text
        rows = page.json()["data"]
        seen |= {row[key] for row in rows}
        if len(rows) < 1000:
            return seen
        skip += 1000


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_the_served_state_equals_a_fresh_fold_of_the_log_after_every_step(tmp_path, backend):
    world = World(tmp_path, backend)
    try:
        world.check()

        @settings(max_examples=examples(0.01), phases=[Phase.explicit, Phase.generate],
                  suppress_health_check=list(HealthCheck))
        @given(st.lists(st.sampled_from(STEPS), min_size=1, max_size=4))
        def steps(names: list[str]) -> None:
            for name in names:
                world.step(name)

        steps()
    finally:
        stop_server(world.server)

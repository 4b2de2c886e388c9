"""The embedders behind semantic search: wordllama's model from its wheel (offline), and the OpenAI-compatible
adapter against a local stand-in server that speaks the real protocol (tests/embedding_standin.py)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from domain.commands import AssertFact, CreateTenant, RegisterEntity
from domain.errors import EmbedderUnavailable, InfrastructureError, InvalidSettings, NoumenaError
from infra.adapters.embedders import OpenAICompatibleEmbedder, WordLlamaEmbedder, embedder_from, embeddings_url
from infra.settings import Settings
from projections.perspectives import Perspectives
from projections.searches import Searches
from tests.conftest import TickingClock
from tests.embedding_standin import EmbeddingsStandIn, hashed_bag_of_words
from tests.properties import examples

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wordllama() -> WordLlamaEmbedder:
    return WordLlamaEmbedder()


@pytest.fixture(scope="module")
def wordllamas_own():
    """wordllama's own inference object, loaded its way, to compare our pooling with."""
    import wordllama as package

    return package.WordLlama.load(cache_dir=Path(package.__file__).parent, disable_download=True)


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b)


# -- wordllama -------------------------------------------------------------------------------------------------------

OFFLINE_PROBE = """
import json, logging, socket, sys, threading, time

def refuse(*args, **kwargs):
    raise OSError("network use attempted")

socket.socket.connect = refuse
socket.create_connection = refuse
socket.getaddrinfo = refuse
import infra.adapters.embedders as embedders

loads = []
load = embedders._load_wordllama

def counted(*args):  # calls through; the pause widens the window two loads would need
    loads.append(args)
    time.sleep(0.2)
    return load(*args)

embedders._load_wordllama = counted
instances = [embedders.WordLlamaEmbedder() for _ in range(4)]
imported_before_use = "wordllama" in sys.modules
barrier, results = threading.Barrier(4), {}

def first_use(k):
    barrier.wait()
    results[k] = instances[k].embed(["hello world", ""] if k == 0 else ["a first use"])

threads = [threading.Thread(target=first_use, args=(k,)) for k in range(4)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
vectors = results[0]
root = logging.getLogger()
print(json.dumps({"shape": list(vectors.shape), "dtype": str(vectors.dtype), "name": instances[0].name,
                  "norms": [float(x) for x in (vectors ** 2).sum(axis=1)], "loads": len(loads),
                  "one_model": all(e._model is instances[0]._model for e in instances),
                  "imported_before_use": imported_before_use,
                  "root_handlers": len(root.handlers), "root_level": root.level,
                  "wordllama_loaded": "wordllama" in sys.modules}))
"""


def test_wordllama_loads_from_the_installed_wheel_once_a_process_lazily_offline_and_without_side_effects(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    env = {key: value for key, value in os.environ.items() if not key.startswith(("HF_", "HUGGINGFACE"))}
    env.update(HOME=str(home), XDG_CACHE_HOME=str(home / ".cache"), PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", OFFLINE_PROBE], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    probe = json.loads(done.stdout)
    assert probe["shape"] == [2, 256] and probe["dtype"] == "float32"
    assert probe["name"] == "wordllama:l2_supercat:256"
    assert probe["norms"][0] == pytest.approx(1.0, abs=1e-5) and probe["norms"][1] == 0.0
    # constructing costs nothing (NOUMENA_EMBEDDER=none never loads it); four first uses at once load it once
    assert not probe["imported_before_use"] and probe["wordllama_loaded"]
    assert probe["loads"] == 1 and probe["one_model"]
    # wordllama's import calls logging.basicConfig(level=INFO): undone, the root logger is as Python made it
    assert (probe["root_handlers"], probe["root_level"]) == (0, 30)
    assert list(home.iterdir()) == []  # nothing downloaded or cached
    assert "INFO" not in done.stderr


def test_wordllama_gives_unit_256_dimensional_float32_rows_and_a_zero_row_for_a_blank_text(wordllama):
    texts = ["Caroline adopted a puppy", "", "   \n", "李总 prefers monthly settlement", "x" * 5000]
    vectors = wordllama.embed(texts)
    assert vectors.shape == (5, 256) and vectors.dtype == np.float32
    norms = np.linalg.norm(vectors, axis=1)
    assert norms[[0, 3, 4]] == pytest.approx([1.0, 1.0, 1.0], abs=1e-5)
    assert not vectors[1].any() and not vectors[2].any()
    assert wordllama.embed([]).shape == (0, 256)


@pytest.mark.parametrize("anchor, related, unrelated", [
    ("Caroline adopted a puppy last spring", "Caroline has a young dog", "The quarterly invoice is due on Friday"),
    ("Li wants to pay by monthly settlement", "Li prefers to settle the bill every month",
     "Melanie went camping with her kids"),
    ("I love painting landscapes", "She enjoys making art of mountains",
     "The server crashed during the database migration"),
    ("李总 prefers monthly settlement", "Li prefers to settle monthly", "Caroline adopted a puppy"),
    ("李总喜欢月结", "李总 月结", "Caroline adopted a puppy"),
])
def test_wordllama_puts_related_sentences_closer_than_unrelated_ones(wordllama, anchor, related, unrelated):
    a, r, u = wordllama.embed([anchor, related, unrelated])
    assert _cosine(a, r) > _cosine(a, u) + 0.2


texts_for_pooling = st.lists(
    st.lists(st.sampled_from(list("abc xyz 李总月结 .,!é") + ["payment ", "monthly ", "Caroline "]), max_size=40)
    .map("".join).filter(lambda t: t.strip()),
    min_size=1, max_size=12)


@settings(max_examples=examples(0.2), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts=texts_for_pooling, budget=st.integers(min_value=1, max_value=40))
def test_our_pooling_equals_wordllamas_own_mean_pooling_for_any_token_budget(wordllama, wordllamas_own, texts,
                                                                              budget):
    """We pool without padding, a bounded number of token vectors at a time: the vectors must be wordllama's."""
    default = wordllama.token_budget
    wordllama.token_budget = budget
    try:
        ours = wordllama.embed(texts)
    finally:
        wordllama.token_budget = default
    np.testing.assert_allclose(ours, wordllamas_own.embed(texts, norm=True), atol=2e-6)


def test_wordllama_embeds_a_text_far_longer_than_its_token_budget_like_wordllama_does(wordllamas_own):
    text = " ".join(["Caroline adopted a puppy and Li prefers monthly settlement 李总"] * 400)
    embedder = WordLlamaEmbedder(token_budget=100)
    (ours,) = embedder.embed([text])
    (theirs,) = wordllamas_own.embed([text], norm=True)
    np.testing.assert_allclose(ours, theirs, atol=1e-5)  # float32 sums of ~8,000 vectors, added in another order


def test_wordllama_gives_the_same_vectors_from_many_threads_as_from_one(wordllama):
    texts = [f"message {i}: Caroline talked about her puppy and the invoice number {i * 7}" for i in range(400)]
    expected = wordllama.embed(texts)
    results: dict[int, np.ndarray] = {}

    def run(k: int) -> None:
        results[k] = wordllama.embed(texts[k::4])

    threads = [threading.Thread(target=run, args=(k,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for k in range(4):
        np.testing.assert_array_equal(results[k], expected[k::4])


def test_wordllama_at_128_dimensions_uses_the_models_leading_dimensions(wordllama):
    small = WordLlamaEmbedder(dimensions=128)
    text = ["Li prefers monthly settlement"]
    full = wordllama.embed(text)[0]
    (vector,) = small.embed(text)
    assert small.name == "wordllama:l2_supercat:128" and vector.shape == (128,)
    np.testing.assert_allclose(vector, full[:128] / np.linalg.norm(full[:128]), atol=2e-6)


# -- the OpenAI-compatible adapter -----------------------------------------------------------------------------------

def test_the_openai_adapter_embeds_through_the_standin_in_batches_in_order_and_normalised():
    texts = ["Caroline adopted a puppy", "", "Caroline has a puppy", "the quarterly invoice is due", "李总 月结",
             "李总 喜欢 月结"]
    with EmbeddingsStandIn(dimensions=64) as server:
        server.shuffled = True  # the items come back reversed: their `index` puts them in place
        embedder = OpenAICompatibleEmbedder(server.url, "standin-model", 64, api_key="sk-test", batch_size=2,
                                            timeout_seconds=5)
        vectors = embedder.embed(texts)
    assert embedder.name == "openai:standin-model:64" and vectors.shape == (6, 64) and vectors.dtype == np.float32
    sent = [request["body"]["input"] for request in server.requests]
    assert sent == [[texts[0], texts[2]], [texts[3], texts[4]], [texts[5]]]  # the blank text is never sent
    assert {request["path"] for request in server.requests} == {"/v1/embeddings"}
    assert {request["authorization"] for request in server.requests} == {"Bearer sk-test"}
    assert server.requests[0]["body"]["model"] == "standin-model"
    assert server.requests[0]["body"]["encoding_format"] == "float"
    for i, text in enumerate(texts):
        raw = np.array(hashed_bag_of_words(text, 64))
        expected = raw / np.linalg.norm(raw) if raw.any() else raw
        np.testing.assert_allclose(vectors[i], expected, atol=1e-6)
    assert _cosine(vectors[0], vectors[2]) > _cosine(vectors[0], vectors[3])
    assert _cosine(vectors[4], vectors[5]) > _cosine(vectors[4], vectors[0])


def test_the_openai_adapter_cuts_texts_to_max_chars_before_sending():
    with EmbeddingsStandIn(dimensions=8) as server:
        embedder = OpenAICompatibleEmbedder(server.url, "m", 8, max_chars=10, timeout_seconds=5)
        embedder.embed(["a" * 50, "short"])
    assert server.requests[0]["body"]["input"] == ["a" * 10, "short"]


TIMEOUT = 0.5


@pytest.mark.parametrize("mode, names_it, bound", [
    ("slow", f"timeout after {TIMEOUT:g} s waiting for", TIMEOUT),
    ("drip", f"timeout after {TIMEOUT:g} s", 2 * TIMEOUT),
    ("http500", "HTTP 500 from", 0),
    ("http503", "HTTP 503 from", 0),
    ("wrong_dimensions", "expected 16 dimensions, got 3", 0),
    ("wrong_count", "wrong count", 0),
    ("malformed_json", "malformed JSON", 0),
    ("non_finite", "non-finite values", 0),
    ("duplicate_index", "has index 0: expected each of 0..1 once", 0),
    ("no_data", "no `data` list", 0),
])
def test_each_failure_of_the_endpoint_is_embedder_unavailable_naming_it_within_the_timeout(mode, names_it, bound):
    with EmbeddingsStandIn(dimensions=16, mode=mode, slow_seconds=10, drip_interval=0.2) as server:
        embedder = OpenAICompatibleEmbedder(server.url, "m", 16, timeout_seconds=TIMEOUT)
        started = time.monotonic()
        with pytest.raises(EmbedderUnavailable) as raised:
            embedder.embed(["Caroline adopted a puppy", "Li prefers monthly settlement"])
        elapsed = time.monotonic() - started
    assert names_it in str(raised.value)
    assert isinstance(raised.value, InfrastructureError)
    if mode not in ("slow", "drip"):
        assert server.url + "/embeddings" in str(raised.value)
    # the failure comes within the bound (slack for a loaded machine), and a timeout is what ended a slow answer
    assert elapsed < bound + 1.5
    if mode in ("slow", "drip"):
        assert elapsed >= TIMEOUT * 0.9


def test_an_unreachable_endpoint_is_embedder_unavailable_naming_the_url():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    embedder = OpenAICompatibleEmbedder(f"http://127.0.0.1:{port}/v1", "m", 8, timeout_seconds=TIMEOUT)
    with pytest.raises(EmbedderUnavailable, match=f"cannot reach http://127.0.0.1:{port}/v1/embeddings"):
        embedder.embed(["anything"])


def test_a_batch_of_blank_texts_makes_no_request_and_gives_zero_rows():
    with EmbeddingsStandIn(dimensions=8) as server:
        vectors = OpenAICompatibleEmbedder(server.url, "m", 8).embed(["", "  "])
    assert server.requests == [] and vectors.shape == (2, 8) and not vectors.any()


@pytest.mark.parametrize("given_url, posted_to", [
    ("https://host/v1", "https://host/v1/embeddings"),
    ("https://host/v1/", "https://host/v1/embeddings"),
    ("https://host", "https://host/v1/embeddings"),
    ("https://host/openai/v1/embeddings", "https://host/openai/v1/embeddings"),
])
def test_the_endpoint_url_takes_the_llm_settings_form_or_the_servers_root(given_url, posted_to):
    assert embeddings_url(given_url) == posted_to


# -- settings --------------------------------------------------------------------------------------------------------

def _settings(monkeypatch, **env: str) -> Settings:
    for key in list(os.environ):
        if key.startswith("NOUMENA_EMBEDDER"):
            monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return Settings()


def test_the_default_embedder_is_wordllama_and_none_means_lexical_only(monkeypatch):
    default = embedder_from(_settings(monkeypatch))
    assert isinstance(default, WordLlamaEmbedder) and default.name == "wordllama:l2_supercat:256"
    assert default.dimensions == 256
    assert embedder_from(_settings(monkeypatch, NOUMENA_EMBEDDER="none")) is None
    small = embedder_from(_settings(monkeypatch, NOUMENA_EMBEDDER_DIMENSIONS="64"))
    assert isinstance(small, WordLlamaEmbedder) and small.dimensions == 64


@pytest.mark.parametrize("env, names", [
    ({"NOUMENA_EMBEDDER": "openai"},
     ["NOUMENA_EMBEDDER_URL", "NOUMENA_EMBEDDER_MODEL", "NOUMENA_EMBEDDER_DIMENSIONS"]),
    ({"NOUMENA_EMBEDDER": "openai", "NOUMENA_EMBEDDER_URL": "https://host/v1", "NOUMENA_EMBEDDER_DIMENSIONS": "8"},
     ["NOUMENA_EMBEDDER_MODEL"]),
    ({"NOUMENA_EMBEDDER": "openai", "NOUMENA_EMBEDDER_MODEL": "m", "NOUMENA_EMBEDDER_DIMENSIONS": "8"},
     ["NOUMENA_EMBEDDER_URL"]),
    ({"NOUMENA_EMBEDDER": "openai", "NOUMENA_EMBEDDER_URL": "host:8080", "NOUMENA_EMBEDDER_MODEL": "m",
      "NOUMENA_EMBEDDER_DIMENSIONS": "8"}, ["NOUMENA_EMBEDDER_URL='host:8080' is not an http"]),
    ({"NOUMENA_EMBEDDER_DIMENSIONS": "100"}, ["NOUMENA_EMBEDDER_DIMENSIONS=100", "64, 128 or 256"]),
])
def test_a_configuration_that_cannot_work_is_refused_at_start_naming_the_setting(monkeypatch, env, names):
    settings_ = _settings(monkeypatch, **env)
    with pytest.raises(InvalidSettings) as raised:
        embedder_from(settings_)
    for name in names:
        assert name in str(raised.value)
    assert raised.value.setting in str(raised.value)
    assert isinstance(raised.value, NoumenaError)  # the CLI prints it as a message, never a traceback


def test_the_openai_embedder_is_configured_from_the_environment_and_keeps_its_key_secret(monkeypatch):
    with EmbeddingsStandIn(dimensions=12) as server:
        settings_ = _settings(monkeypatch, NOUMENA_EMBEDDER="openai", NOUMENA_EMBEDDER_URL=server.url,
                              NOUMENA_EMBEDDER_MODEL="standin", NOUMENA_EMBEDDER_API_KEY="sk-very-secret",
                              NOUMENA_EMBEDDER_DIMENSIONS="12", NOUMENA_EMBEDDER_TIMEOUT_SECONDS="2",
                              NOUMENA_EMBEDDER_BATCH_SIZE="3", NOUMENA_EMBEDDER_MAX_CHARS="100")
        embedder = embedder_from(settings_)
        assert isinstance(embedder, OpenAICompatibleEmbedder)
        vectors = embedder.embed([f"text {i}" for i in range(7)])
    assert vectors.shape == (7, 12) and embedder.timeout == 2 and embedder.max_chars == 100
    assert [len(r["body"]["input"]) for r in server.requests] == [3, 3, 1]
    assert server.requests[0]["authorization"] == "Bearer sk-very-secret"
    assert "sk-very-secret" not in repr(settings_)


# -- search over the adapter ------------------------------------------------------------------------------------------

def test_search_through_the_openai_adapter_falls_back_to_lexical_naming_the_failure_and_recovers(make_noumena,
                                                                                                  tmp_path):
    clock = TickingClock(datetime(2026, 3, 1, tzinfo=UTC), step=timedelta(seconds=1))
    noumena = make_noumena("sqlite", clock=clock)
    run = noumena.service.execute
    run(CreateTenant(tenant="acme"))
    for ref, label in (("agent:sales", "sales agent"), ("person:caroline", "Caroline"), ("person:li", "李总"),
                       ("memory:pet", "Caroline adopted a dog named Oscar"),
                       ("memory:pay", "李总 prefers monthly settlement"), ("memory:cat", "a cat called Tom")):
        run(RegisterEntity(tenant="acme", ref=ref, label=label))

    def fact(subject: str, obj: str) -> str:
        outcome = run(AssertFact(tenant="acme", subject=subject, relation="has", object=obj, scope="org"))
        return outcome.events[-1].fact_id  # type: ignore[attr-defined,no-any-return]

    pet = fact("person:caroline", "memory:pet")
    fact("person:li", "memory:pay")
    with EmbeddingsStandIn(dimensions=64, slow_seconds=10) as server:
        embedder = OpenAICompatibleEmbedder(server.url, "standin", 64, timeout_seconds=TIMEOUT)
        searches = Searches(Perspectives(noumena.log, clock), clock, embedder=embedder)

        def ask(query: str):  # type: ignore[no-untyped-def]
            return searches.search_for("acme", "agent:sales", query)

        working = ask("Oscar the dog")
        assert working.semantic == "exact" and working.embedder == "openai:standin:64"
        assert working.items[0].fact_id == pet and working.items[0].scores["semantic"] > 0
        server.mode = "http503"
        fact("person:caroline", "memory:cat")  # a new fact to embed
        failing = ask("Oscar the dog")
        assert failing.semantic.startswith("failed: HTTP 503 from " + server.url)
        assert failing.items[0].fact_id == pet and failing.items[0].scores["semantic"] == 0  # by its words
        server.mode = "slow"
        started = time.monotonic()
        slow = ask("Oscar the dog")
        elapsed = time.monotonic() - started
        assert slow.semantic.startswith(f"failed: timeout after {TIMEOUT:g} s") and slow.items[0].fact_id == pet
        assert elapsed < TIMEOUT + 1.5
        server.mode = "ok"
        recovered = ask("a cat called Tom")
        assert recovered.semantic == "exact" and recovered.items[0].scores["semantic"] > 0

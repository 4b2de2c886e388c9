"""Embedders for semantic search (docs/embedders.md): the offline default, wordllama's static model shipped inside
its wheel, and any OpenAI-compatible `/v1/embeddings` endpoint.

Both give a float32 array with one L2-normalised row per text, in order; a blank text gives a zero row (it is never
sent anywhere). Whatever goes wrong becomes `EmbedderUnavailable`, its message naming the problem, so search can
fall back to lexical ranking and say why.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Sequence
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import numpy as np

from domain.errors import EmbedderUnavailable, InvalidSettings

if TYPE_CHECKING:
    from domain.ports import Embedder
    from infra.settings import Settings

_LOAD_LOCK = threading.Lock()
_LOADED: dict[tuple[str, int], tuple[Any, np.ndarray]] = {}  # one model per process, shared by every embedder


def normalise_rows(vectors: np.ndarray) -> np.ndarray:
    """Scale each row to length 1 in place; a zero row stays zero."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    np.divide(vectors, norms, out=vectors, where=norms > 0)
    return vectors


class WordLlamaEmbedder:
    """wordllama's `l2_supercat` model: a static table of 32,000 token vectors (256 dimensions; its leading 64 or 128
    can be used alone), so a text's vector is the mean of its tokens' vectors. The weights and the tokenizer come
    from the installed package; nothing is ever downloaded. Loaded on first use (about half a second), once per
    process, under a lock, and shared by every instance; `embed` may then be called from any number of threads.

    The pooling is wordllama's own (average over the tokens), but texts are grouped by length so little padding is
    gathered, and no group gathers more than `token_budget` token vectors however long a text is."""

    config = "l2_supercat"
    DIMENSIONS = (64, 128, 256)
    _CHUNK_TEXTS = 1024  # texts tokenized at once

    def __init__(self, dimensions: int = 256, token_budget: int = 16_384) -> None:
        if dimensions not in self.DIMENSIONS:
            raise ValueError(f"wordllama {self.config} has no {dimensions}-dimensional form: use 64, 128 or 256")
        if token_budget < 1:
            raise ValueError("token_budget must be at least 1")
        self.dimensions = dimensions
        self.name = f"wordllama:{self.config}:{dimensions}"
        self.token_budget = token_budget
        self._model: tuple[Any, np.ndarray] | None = None

    def _loaded(self) -> tuple[Any, np.ndarray]:
        model = self._model
        if model is None:
            key = (self.config, self.dimensions)
            with _LOAD_LOCK:
                if key not in _LOADED:
                    _LOADED[key] = _load_wordllama(self.config, self.dimensions)
                model = self._model = _LOADED[key]
        return model

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        out = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        live = [i for i, text in enumerate(texts) if text.strip()]
        if not live:
            return out
        tokenizer, table = self._loaded()
        for start in range(0, len(live), self._CHUNK_TEXTS):
            rows = live[start:start + self._CHUNK_TEXTS]
            encodings = tokenizer.encode_batch([texts[i] for i in rows], add_special_tokens=False)
            tokens = [e.ids for e in encodings]
            lengths = np.fromiter(map(len, tokens), dtype=np.int64, count=len(rows))
            ids = np.fromiter(chain.from_iterable(tokens), dtype=np.intp, count=int(lengths.sum()))
            np.clip(ids, 0, len(table) - 2, out=ids)  # as wordllama does: an id past the vocabulary is its last
            out[rows] = _token_sums(table, ids, lengths, self.token_budget)
        return normalise_rows(out)


def _token_sums(table: np.ndarray, ids: np.ndarray, lengths: np.ndarray, budget: int) -> np.ndarray:
    """Per text, the sum of its tokens' vectors (`ids` holds every text's tokens one after another; the table's
    last row is zeros, for padding). Texts are taken shortest first in groups padded to their longest, each group
    gathering at most `budget` token vectors; a text longer than that is summed a slice at a time. (The sum's
    direction is the mean's: rows are normalised after.)"""
    count = len(lengths)
    pad = len(table) - 1
    offsets = np.zeros(count + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    sums = np.zeros((count, table.shape[1]), dtype=np.float32)
    order = np.argsort(lengths, kind="stable")
    ordered = lengths[order]
    first = int(np.searchsorted(ordered, 1))  # texts without tokens keep a zero row
    while first < count:
        shortest = int(ordered[first])
        if shortest > budget:  # the rest are each longer than the budget
            for text in order[first:]:
                low, high = int(offsets[text]), int(offsets[text + 1])
                for begin in range(low, high, budget):
                    sums[text] += table[ids[begin:min(begin + budget, high)]].sum(axis=0)
            break
        # the longest group from `first` whose size times its longest text stays within the budget
        sizes = np.arange(1, min(count - first, budget // shortest) + 1)
        fits = sizes * ordered[first:first + len(sizes)] <= budget
        size = len(sizes) if fits.all() else max(int(np.argmin(fits)), 1)
        group = order[first:first + size]
        longest = int(ordered[first + size - 1])
        column = np.arange(longest)
        positions = offsets[group][:, None] + column
        padded = np.where(column < lengths[group][:, None], ids[np.minimum(positions, len(ids) - 1)], pad)
        sums[group] = table[padded].sum(axis=1)
        first += size
    return sums


def _load_wordllama(config: str, dimensions: int) -> tuple[Any, np.ndarray]:
    """The tokenizer and the token table, from the installed wheel only. wordllama looks for its tokenizer config
    in `<package>/tokenizer/` first and then in `<cache_dir>/tokenizers/`, while the wheel ships it in
    `<package>/tokenizers/`: pointing cache_dir at the package finds both files where they are installed."""
    # (Called under _LOAD_LOCK.) Importing wordllama calls logging.basicConfig(level=INFO), which would make every
    # library's INFO messages appear on stderr: undo it.
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        import wordllama
    except ImportError as error:
        raise EmbedderUnavailable(f"wordllama is not installed: {error}") from None
    finally:
        for handler in list(root.handlers):
            if handler not in handlers:
                root.removeHandler(handler)
        root.setLevel(level)
    package = Path(wordllama.__file__).parent
    try:
        model = wordllama.WordLlama.load(config, cache_dir=package, dim=256,
                                         trunc_dim=None if dimensions == 256 else dimensions,
                                         disable_download=True)
    except (OSError, ValueError) as error:  # FileNotFoundError: a file missing from the installed package
        raise EmbedderUnavailable(f"the wordllama model {config} could not be loaded from {package}: {error}"
                                  ) from None
    tokenizer = model.tokenizer
    tokenizer.no_padding()  # wordllama turned padding on; we pool over the real tokens only
    table = np.asarray(model.embedding, dtype=np.float32)
    if table.ndim != 2 or table.shape[1] != dimensions:
        raise EmbedderUnavailable(f"the wordllama model {config} has shape {table.shape}, expected "
                                  f"(vocabulary, {dimensions})")
    return tokenizer, np.vstack([table, np.zeros((1, dimensions), dtype=np.float32)])  # a zero row to pad with


def embeddings_url(base_url: str) -> str:
    """Where to POST: `…/embeddings` as given, `…/v1` + `/embeddings` (the form NOUMENA_LLM_URL takes), else
    `/v1/embeddings` appended to the server's root."""
    url = base_url.rstrip("/")
    if url.endswith("/embeddings"):
        return url
    if url.endswith("/v1"):
        return url + "/embeddings"
    return url + "/v1/embeddings"


class OpenAICompatibleEmbedder:
    """Any server that answers OpenAI's `POST /v1/embeddings` (OpenAI, vLLM, llama.cpp, Ollama, TEI, ...).

    Texts go in batches of `batch_size`, each cut to `max_chars`; one attempt per batch, no retries (search is
    waiting: it falls back to lexical instead). A request fails after `timeout_seconds` without an answer: the
    connection, the upload and each wait for the answer's bytes are bounded by it, and a request whose answer is
    still arriving after it fails at its next bytes, so a server that sends slowly is cut off too (within twice the
    timeout). Every answer is checked: a `data` list with one item per text, each with its `index` and an
    `embedding` of exactly `dimensions` finite numbers."""

    def __init__(self, url: str, model: str, dimensions: int, api_key: str = "", timeout_seconds: float = 10.0,
                 batch_size: int = 64, max_chars: int = 6000) -> None:
        if dimensions < 1:
            raise ValueError("dimensions must be at least 1")
        if batch_size < 1 or max_chars < 1 or timeout_seconds <= 0:
            raise ValueError("batch_size, max_chars and timeout_seconds must be positive")
        self.url = embeddings_url(url)
        self.model = model
        self.dimensions = dimensions
        self.name = f"openai:{model}:{dimensions}"
        self.timeout = timeout_seconds
        self.batch_size = batch_size
        self.max_chars = max_chars
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(timeout=httpx.Timeout(timeout_seconds), headers=headers)

    def close(self) -> None:
        self._client.close()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        out = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        live = [i for i, text in enumerate(texts) if text.strip()]
        for start in range(0, len(live), self.batch_size):
            rows = live[start:start + self.batch_size]
            out[rows] = self._request([texts[i][:self.max_chars] for i in rows])
        return out

    def _request(self, batch: list[str]) -> np.ndarray:
        body = {"model": self.model, "input": batch, "encoding_format": "float"}
        deadline = time.monotonic() + self.timeout
        try:
            with self._client.stream("POST", self.url, json=body) as response:
                chunks = []
                for chunk in response.iter_bytes():
                    chunks.append(chunk)
                    if time.monotonic() > deadline:
                        raise EmbedderUnavailable(f"timeout after {self.timeout:g} s: {self.url} was still sending "
                                                  "its answer")
                status = response.status_code
        except httpx.TimeoutException:
            raise EmbedderUnavailable(f"timeout after {self.timeout:g} s waiting for {self.url}") from None
        except httpx.HTTPError as error:
            raise EmbedderUnavailable(f"cannot reach {self.url}: {error}") from None
        content = b"".join(chunks)
        if not 200 <= status < 300:
            text = content[:300].decode("utf-8", "replace")
            raise EmbedderUnavailable(f"HTTP {status} from {self.url}: {text}")
        return self._parse(content, len(batch))

    def _parse(self, content: bytes, count: int) -> np.ndarray:
        where = f"from {self.url}"
        try:
            answer = json.loads(content)
        except ValueError as error:  # UnicodeDecodeError included
            raise EmbedderUnavailable(f"malformed JSON {where}: {error}") from None
        data = answer.get("data") if isinstance(answer, dict) else None
        if not isinstance(data, list):
            raise EmbedderUnavailable(f"the answer {where} has no `data` list of embeddings")
        if len(data) != count:
            raise EmbedderUnavailable(f"wrong count {where}: sent {count} texts, got {len(data)} embeddings")
        vectors = np.zeros((count, self.dimensions), dtype=np.float64)
        seen = [False] * count
        for position, item in enumerate(data):
            index = item.get("index") if isinstance(item, dict) else None
            if type(index) is not int or not 0 <= index < count or seen[index]:
                raise EmbedderUnavailable(f"data[{position}] {where} has index {index!r}: expected each of "
                                          f"0..{count - 1} once")
            embedding = item.get("embedding")
            if not isinstance(embedding, list):
                raise EmbedderUnavailable(f"data[{position}].embedding {where} is not a list of numbers "
                                          f"(got {type(embedding).__name__})")
            if len(embedding) != self.dimensions:
                raise EmbedderUnavailable(f"expected {self.dimensions} dimensions, got {len(embedding)} in "
                                          f"data[{position}] {where}")
            if not all(type(value) is float or type(value) is int for value in embedding):
                raise EmbedderUnavailable(f"data[{position}].embedding {where} holds something not a number")
            row = np.asarray(embedding, dtype=np.float64)
            if not np.isfinite(row).all():
                raise EmbedderUnavailable(f"non-finite values (NaN or infinity) in data[{position}].embedding "
                                          f"{where}")
            vectors[index] = row
            seen[index] = True
        return normalise_rows(vectors).astype(np.float32)


def embedder_from(settings: Settings) -> Embedder | None:
    """The embedder `settings` configure; None with NOUMENA_EMBEDDER=none (lexical search only). Refuses, naming the
    setting, a configuration that cannot work. (The settings come from the caller: adapters never read them
    themselves, which would tie them to the composition root's settings in both directions.)"""
    if settings.embedder == "none":
        return None
    if settings.embedder == "openai":
        needed = {"NOUMENA_EMBEDDER_URL": settings.embedder_url, "NOUMENA_EMBEDDER_MODEL": settings.embedder_model,
                  "NOUMENA_EMBEDDER_DIMENSIONS": settings.embedder_dimensions}
        missing = [name for name, value in needed.items() if not value]
        if missing:
            raise InvalidSettings(f"NOUMENA_EMBEDDER=openai needs {' and '.join(missing)} (the endpoint's base URL, "
                                  "e.g. https://host/v1, its model name and the dimensions it answers)",
                                  setting=missing[0])
        if not settings.embedder_url.startswith(("http://", "https://")):
            raise InvalidSettings(f"NOUMENA_EMBEDDER_URL={settings.embedder_url!r} is not an http:// or https:// "
                                  "URL", setting="NOUMENA_EMBEDDER_URL")
        return OpenAICompatibleEmbedder(
            settings.embedder_url, settings.embedder_model, settings.embedder_dimensions,
            settings.embedder_api_key.get_secret_value(), timeout_seconds=settings.embedder_timeout_seconds,
            batch_size=settings.embedder_batch_size, max_chars=settings.embedder_max_chars)
    dimensions = settings.embedder_dimensions or 256
    if dimensions not in WordLlamaEmbedder.DIMENSIONS:
        raise InvalidSettings(f"NOUMENA_EMBEDDER_DIMENSIONS={dimensions} is not available with "
                              "NOUMENA_EMBEDDER=wordllama: use 64, 128 or 256 (0 means 256)",
                              setting="NOUMENA_EMBEDDER_DIMENSIONS")
    return WordLlamaEmbedder(dimensions)

"""Embedder adapters (placeholder until the embedders branch lands): wordllama's static model, offline."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np


class WordLlamaEmbedder:
    """wordllama's 256-d static model, shipped inside its PyPI package; loaded on first use, never downloaded."""

    name = "wordllama:l2_supercat:256"
    dimensions = 256

    def __init__(self) -> None:
        self._model: Any = None
        self._lock = threading.Lock()

    def _load(self) -> Any:
        with self._lock:
            if self._model is None:
                import wordllama
                from wordllama import WordLlama

                self._model = WordLlama.load(cache_dir=Path(wordllama.__file__).parent, disable_download=True)
        return self._model

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.asarray(self._load().embed(list(texts), norm=True), dtype=np.float32)


_SHARED: dict[str, WordLlamaEmbedder] = {}


def embedder_from(settings: Any) -> WordLlamaEmbedder | None:
    """The embedder the settings name (`NOUMENA_EMBEDDER`): wordllama (default, one model per process) or none."""
    import os

    if os.environ.get("NOUMENA_EMBEDDER", "wordllama") == "none":
        return None
    return _SHARED.setdefault("wordllama", WordLlamaEmbedder())

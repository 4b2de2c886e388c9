"""An extractor for any OpenAI-compatible chat-completions endpoint.

It sends the compacted turns (and the summary) with a JSON schema of `Extraction` as the response format,
validates the answer with pydantic, and bounds every call: a timeout per request and a fixed number of
retries (`tenacity`) with exponential backoff on timeouts, connection errors, 429 and 5xx. Anything else — a
4xx, an answer that is not JSON, JSON that fails the schema — fails the extraction with the reason; nothing is
stored.
"""

from __future__ import annotations

import json

import httpx
from pydantic import ValidationError
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from domain.consolidation import CompactionInput, Extraction, ExtractionFailed

SYSTEM_PROMPT = (
    "You consolidate an AI agent's conversation into an organization's memory. Return only JSON matching the "
    "schema: the people and things mentioned (refs like person:li, file:quotes/q3.xlsx, with the label used), "
    "relations between them as facts (subject, relation in snake_case, object, the reason it holds, the "
    "message_ids it came from), and facts the conversation shows are no longer true (invalidations). Record "
    "relationships, decisions and preferences, not task details. Never claim the org scope."
)


class _Transient(Exception):
    """A call that failed in a way worth trying again (timeout, connection, 429, 5xx)."""


class LLMExtractor:
    name = "llm"

    def __init__(self, url: str, model: str, api_key: str = "", timeout_seconds: float = 20.0, retries: int = 2,
                 backoff_seconds: float = 0.5) -> None:
        self.url = url.rstrip("/") + "/chat/completions"
        self.model = model
        self.api_key = api_key
        self.timeout = timeout_seconds
        self.retries = retries
        self.backoff = backoff_seconds

    def _request(self, compaction: CompactionInput) -> dict[str, object]:
        turns = "\n".join(f"[{mid}] {role}: {content}" for mid, role, content in compaction.turns)
        user = f"Session {compaction.session_id} of {compaction.agent}"
        if compaction.serving:
            user += f", serving {compaction.serving}"
        user += f".\nSummary: {compaction.summary or '(none)'}\nTurns:\n{turns}"
        schema = Extraction.model_json_schema()
        return {
            "model": self.model,
            "messages": [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}],
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": "extraction", "schema": schema, "strict": False}},
            "temperature": 0,
        }

    def extract(self, compaction: CompactionInput) -> Extraction:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        body = self._request(compaction)
        retrying = Retrying(retry=retry_if_exception_type(_Transient), stop=stop_after_attempt(self.retries + 1),
                            wait=wait_exponential(multiplier=self.backoff, min=self.backoff), reraise=True)
        try:
            response = retrying(self._post, body, headers)
        except _Transient as error:
            raise ExtractionFailed(f"gave up after {self.retries + 1} attempts: {error}") from None
        return self._parse(response)

    def _post(self, body: dict[str, object], headers: dict[str, str]) -> httpx.Response:
        """One call; a failure worth another try raises `_Transient`, a 4xx fails the extraction."""
        try:
            response = httpx.post(self.url, json=body, headers=headers, timeout=self.timeout)
        except httpx.TimeoutException:
            raise _Transient(f"timed out after {self.timeout:g} s") from None
        except httpx.HTTPError as error:
            raise _Transient(f"cannot reach {self.url}: {error}") from None
        if response.status_code == 429 or response.status_code >= 500:
            raise _Transient(f"HTTP {response.status_code} from {self.url}")
        if response.status_code >= 400:
            raise ExtractionFailed(f"HTTP {response.status_code} from {self.url}: {response.text[:300]}")
        return response

    def _parse(self, response: httpx.Response) -> Extraction:
        try:
            content = response.json()["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError) as error:
            raise ExtractionFailed(f"the answer is not a chat completion: {error!r}") from None
        try:
            data = json.loads(content)
        except (ValueError, TypeError) as error:
            raise ExtractionFailed(f"the answer's content is not JSON: {error}") from None
        if not isinstance(data, dict):
            raise ExtractionFailed("the answer's content is not a JSON object")
        data["explicit"] = False  # model output never counts as an explicit write
        try:
            return Extraction.model_validate(data)
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise ExtractionFailed(f"the answer fails the extraction schema at {where}: {first['msg']}") from None

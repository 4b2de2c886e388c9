"""Dates a request names, as a window of time to prefer ("what did she share on 16 June, 2023?").

A request that names a day or a month asks about what was said (a turn's `occurred_at`) or held (a fact's
`valid_from`) then. Only explicit dates are read, in English: `16 June, 2023`, `June 16, 2023`, `June 2023`, `last
June` (the last June before the moment of the request). Relative words without a calendar name ("yesterday",
"last week") are left to the other signals: they would need to know when the request's own conversation is.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

MONTHS = {name: k for k, name in enumerate(("january", "february", "march", "april", "may", "june", "july",
                                             "august", "september", "october", "november", "december"), start=1)}
_MONTH = r"(january|february|march|april|may|june|july|august|september|october|november|december)"
_DAY_MONTH_YEAR = re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+{_MONTH},?\s+(\d{{4}})\b", re.IGNORECASE)
_MONTH_DAY_YEAR = re.compile(rf"\b{_MONTH}\s+(\d{{1,2}})(?:st|nd|rd|th)?,?\s+(\d{{4}})\b", re.IGNORECASE)
_MONTH_YEAR = re.compile(rf"\b{_MONTH},?\s+(\d{{4}})\b", re.IGNORECASE)
_LAST_MONTH = re.compile(rf"\blast\s+{_MONTH}\b", re.IGNORECASE)

DAY_BEFORE = timedelta(days=3)
DAY_AFTER = timedelta(days=4)
"""A named day looks a few days either way: what happened on it is often told a day or two later."""
MONTH_AFTER = timedelta(days=7)
"""A named month reaches a week past its end, for the same reason."""


def _day(year: int, month: int, day: int) -> datetime | None:
    try:
        return datetime(year, month, day, tzinfo=UTC)
    except ValueError:
        return None


def _month(year: int, month: int) -> tuple[datetime, datetime]:
    start = datetime(year, month, 1, tzinfo=UTC)
    end = datetime(year + (month == 12), month % 12 + 1, 1, tzinfo=UTC)
    return start, end + MONTH_AFTER


def time_window(request: str, now: datetime) -> tuple[float, float] | None:
    """The window (epoch seconds, start inclusive, end exclusive) of the first date `request` names, else None."""
    for pattern, order in ((_DAY_MONTH_YEAR, "dmy"), (_MONTH_DAY_YEAR, "mdy")):
        match = pattern.search(request)
        if match:
            parts = dict(zip(order, match.groups(), strict=True))
            day = _day(int(parts["y"]), MONTHS[parts["m"].lower()], int(parts["d"]))
            if day is not None:
                return (day - DAY_BEFORE).timestamp(), (day + DAY_AFTER).timestamp()
    match = _MONTH_YEAR.search(request)
    if match:
        start, end = _month(int(match.group(2)), MONTHS[match.group(1).lower()])
        return start.timestamp(), end.timestamp()
    match = _LAST_MONTH.search(request)
    if match:
        month = MONTHS[match.group(1).lower()]
        year = now.year if month < now.month else now.year - 1
        start, end = _month(year, month)
        return start.timestamp(), end.timestamp()
    return None

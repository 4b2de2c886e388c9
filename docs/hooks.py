"""mkdocs hook: the settings reference is generated from the settings model (infra/settings.py) at every build,
so the page cannot drift from the code. A setting without a description is a build warning (an error under
`mkdocs build --strict`, which `make test` runs)."""

from __future__ import annotations

import logging
import types
import typing
from typing import Any

from pydantic import SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

MARKER = "<!-- settings-reference -->"
log = logging.getLogger("mkdocs.hooks.settings_reference")


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, settings_table())


def settings_table() -> str:
    from infra.settings import Settings

    prefix = Settings.model_config.get("env_prefix", "")
    rows = ["| variable | default | meaning |", "| --- | --- | --- |"]
    for name, field in Settings.model_fields.items():
        if not field.description:
            log.warning("infra/settings.py: the setting %r has no description (Field(description=...))", name)
        variable = f"{prefix}{name}".upper()
        kind = _type(field)
        rows.append(f"| `{variable}` | {_default(field)} | {_cell(field.description or '')}"
                    f"{f' ({kind})' if kind != 'text' else ''} |")
    return "\n".join(rows)


def _type(field: FieldInfo) -> str:
    annotation = field.annotation
    text = _name(annotation)
    bounds = [f"{symbol} {getattr(m, attr)}" for m in field.metadata
              for attr, symbol in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<"))
              if getattr(m, attr, None) is not None]
    return text + (f" ({', '.join(bounds)})" if bounds else "")


def _name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return "one of " + ", ".join(f"`{value}`" for value in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_name(a) for a in typing.get_args(annotation) if a is not type(None)) + " (optional)"
    if annotation is SecretStr:
        return "secret"
    return {str: "text", int: "integer", float: "number", bool: "boolean"}.get(annotation, annotation.__name__.lower())


def _default(field: FieldInfo) -> str:
    value = field.default
    if value is PydanticUndefined:
        return "(required)"
    if isinstance(value, SecretStr):
        value = value.get_secret_value()
    if value is None or value == "":
        return "(empty)"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value}`"


def _cell(text: str) -> str:
    """One table cell: one line, pipes escaped, `<` and `>` outside code spans shown as written."""
    parts = " ".join(text.split()).replace("|", "\\|").split("`")
    return "`".join(p if i % 2 else p.replace("<", "&lt;").replace(">", "&gt;") for i, p in enumerate(parts))

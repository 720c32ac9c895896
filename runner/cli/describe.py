"""`convgrid tasks [NAME]`: each task's params with type, default, bounds and doc."""

from __future__ import annotations

import inspect
import shutil
import textwrap
from typing import Any

from pydantic.fields import FieldInfo

from runner.errors import ConfigError
from runner.grid.identity import discriminators, tag_value, variants
from runner.grid.schema import curve_columns
from tasks import UnknownTaskError, get_task, task_names


def _doc(obj: Any) -> str:
    """The docstring's first paragraph as one line: its first line alone stops mid-phrase where the
    paragraph wraps in the source."""
    doc = inspect.getdoc(obj) or inspect.getdoc(inspect.getmodule(obj)) or ""
    return " ".join(doc.strip().split("\n\n")[0].split())


def list_tasks(width: int | None = None) -> str:
    """One entry per task, its description wrapped (whole words, never cut) to `width` columns (default:
    the terminal's, 100 when output is not a terminal), continuation lines under the description."""
    width = width or shutil.get_terminal_size((100, 24)).columns
    indent = " " * 23  # f"{name:<16} v{version:<4} " is 23 columns
    lines = []
    for name in task_names():
        try:
            task = get_task(name)
        except ImportError as exc:
            lines.append(f"{name:<16} (unavailable: {exc})")
            continue
        head = f"{name:<16} v{task.version:<4} "
        lines.append(
            textwrap.fill(
                _doc(type(task)),
                width=max(width, len(indent) + 20),
                initial_indent=head,
                subsequent_indent=indent,
                break_long_words=False,
                break_on_hyphens=False,
            )
        )
    return "\n".join(lines)


def _bounds(field: FieldInfo) -> str:
    parts = []
    for meta in field.metadata:
        for attr, sym in (
            ("ge", ">="),
            ("gt", ">"),
            ("le", "<="),
            ("lt", "<"),
            ("min_length", "len>="),
            ("max_length", "len<="),
        ):
            value = getattr(meta, attr, None)
            if value is not None:
                parts.append(f"{sym}{value}")
    return " ".join(parts)


def _type_name(annotation: Any) -> str:
    text = getattr(annotation, "__name__", None) if isinstance(annotation, type) else None
    return text or str(annotation).replace("typing.", "")


def describe_task(name: str) -> str:
    try:
        task = get_task(name)
    except UnknownTaskError as exc:
        raise ConfigError(str(exc).split(";")[0], key="task", choices=task_names()) from None
    lines = [f"{task.name} (version {task.version}): {_doc(type(task))}"]
    tags = discriminators(task)
    for model in variants(task):
        title = ", ".join(f"{t}={tag_value(model, t)}" for t in sorted(tags)) if tags else "params"
        lines.append(f"\n[{title}]")
        for fname, field in model.model_fields.items():
            if fname in tags:
                continue
            default = "required" if field.is_required() else repr(field.get_default(call_default_factory=True))
            lines.append(
                (
                    f"  {fname:<18} {_type_name(field.annotation):<28} default {default:<12} {_bounds(field):<14} "
                    f"{field.description or ''}"
                ).rstrip()
            )
    lines.append("\nsummary: " + ", ".join(f"{k} ({v})" for k, v in task.summary_fields.items()))
    columns = curve_columns(task)  # the store's names: `<name>_t` where runs has a column of the name
    lines.append("curve:   step (int), " + ", ".join(f"{columns[k]} ({v})" for k, v in task.curve_fields.items()))
    if any(k != c for k, c in columns.items()):
        lines.append("         (<name>_t: the value at step t of a field named like a runs column)")
    return "\n".join(lines)

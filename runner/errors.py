"""User-facing errors. The CLI turns a ConfigError into one message and exit code 2."""

from __future__ import annotations

from collections.abc import Iterable


class ConfigError(Exception):
    """Bad input: names the file, the block, the key and, where there are any, the valid choices."""

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        block: int | None = None,
        key: str | None = None,
        choices: Iterable[str] | None = None,
    ) -> None:
        self.message = message
        self.file = file
        self.block = block
        self.key = key
        self.choices = list(choices) if choices is not None else None
        super().__init__(str(self))

    def __str__(self) -> str:
        where = [self.file or "<spec>"]
        if self.block is not None:
            where.append(f"block {self.block}")
        if self.key is not None:
            where.append(f"key '{self.key}'")
        text = f"{': '.join(where)}: {self.message}"
        if self.choices:
            text += f" (valid choices: {', '.join(map(str, self.choices))})"
        return text

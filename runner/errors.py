"""User-facing errors. The CLI turns a ConfigError into one message and exit code 2."""

from __future__ import annotations

import difflib
import errno
import os
import re
import reprlib
import signal
from collections.abc import Iterable

# What a process exits with when another one holds what this command needs (a study's lease, runner.coord.
# study_lease): nothing was changed, and the same command may be run again later (sysexits' EX_TEMPFAIL).
EXIT_BUSY = 75
# The longest a value quoted in a message may be: a list of 43 million seeds is shown by its first few.
SHOWN_CHARS = 200
# The longest a message may be, whatever went into it (a backstop: values are cut by `shown` first).
MESSAGE_CHARS = 900


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
        where = [self.file] if self.file else []  # none for a command-line option: its key names it
        if self.block is not None:
            where.append(f"block {self.block}")
        if self.key is not None:
            where.append(f"key '{self.key}'")
        text = redact(": ".join([*where, self.message]))
        if self.choices:
            text += f" (valid choices: {', '.join(map(str, self.choices))})"
        return printable(clip(text, MESSAGE_CHARS))


class Busy(Exception):
    """Another process holds what this command needs; nothing was changed (exit code EXIT_BUSY)."""


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """' (did you mean 'blocks'?)' for a misspelt key close to a valid one, else ''."""
    close = difflib.get_close_matches(word, [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


# Credentials a results URI, a storage URL or an object-store query string may carry: the password of
# scheme://user:password@host (the user name stays: it says whose database it is), and query values
# whose names say secret.
_USERINFO = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://[^/@\s:]+):[^@/\s]*@")
_QUERY = re.compile(
    r"([?&;](?:password|passwd|pwd|secret|secret_key|secret_access_key|access_key|token|session_token|"
    r"api_key|apikey|key|sig|signature|credentials?)=)[^&;#\s]*",
    re.IGNORECASE,
)


def redact(text: str) -> str:
    """`text` with every credential in a URI replaced by ***: what may be printed or written anywhere."""
    return _QUERY.sub(r"\1***", _USERINFO.sub(r"\1:***@", text))


# Characters that move the cursor, clear the screen, hide text or reorder it when printed: C0 and C1 controls
# (NUL, ESC, CR, LF...), DEL, zero-width and bidirectional formatting marks, line and paragraph separators.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")


_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escaped(char: str) -> str:
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def printable(text: str, keep: str = "") -> str:
    """`text` with every control character escaped as Python writes it (\\x1b, \\n, \\u202e), except those
    in `keep` (a table's own newlines): what a name from a file or a store may look like on a terminal."""
    return _CONTROL.sub(lambda m: m.group() if m.group() in keep else _escaped(m.group()), text)


def control_characters(text: str) -> list[str]:
    """The distinct control characters of `text`, escaped (empty for a clean name)."""
    return sorted({printable(c) for c in _CONTROL.findall(text)})


def check_name(name: str, file: str, key: str | None) -> str:
    """A grid's or study's name, refused where it holds control characters: it is printed on terminals,
    written to the store and into reports."""
    found = control_characters(name)
    if found:
        raise ConfigError(
            f"the name {shown(name)} has control characters ({', '.join(found)}); use printable text",
            file=file,
            key=key,
        )
    return name


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxlist, _REPR.maxtuple, _REPR.maxdict = 3, 12, 12, 8
_REPR.maxstring, _REPR.maxother, _REPR.maxlong = SHOWN_CHARS, SHOWN_CHARS, 40


def clip(text: str, limit: int = SHOWN_CHARS) -> str:
    """`text`, or its first `limit` characters with an ellipsis and the length it had."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text):,} characters)"


def shown(value: object, limit: int = SHOWN_CHARS) -> str:
    """A value as a message quotes it: its repr, built with bounded cost (reprlib: a few items of each
    list, a few levels deep) and cut to `limit` characters."""
    return clip(_REPR.repr(value), limit)


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where the process is so that it unwinds like Ctrl-C: finished runs
    are flushed by the same `finally` blocks, workers are stopped, and the exit code says which signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


# The last signal raise_terminated saw: a library that catches the KeyboardInterrupt and raises a
# plain one of its own (Ray does, from inside a blocking call) must not turn SIGTERM into "Ctrl-C".
received: list[int] = []


def raise_terminated(signum: int, _frame: object) -> None:
    # Ray's C++ failure-signal handler (abseil's), which a Ray started outside the main thread leaves
    # in front of ours, arms a 3-second SIGALRM abort before handing SIGTERM on (ray-project/ray#64830):
    # an unwinding that flushes and stops workers for longer than that died with SIGABRT (-6, seen
    # in CI) instead of exiting 143. The unwinding is ours to finish: disarm it.
    if hasattr(signal, "alarm"):
        signal.alarm(0)
    received.append(signum)
    raise Terminated(signum)


# What the system says when a filesystem cannot take a write, whatever was written.
STORE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.EACCES, errno.EPERM})


class StoreIOError(Exception):
    """Writing the results store failed for a reason of the store, not of a run: a full disk (ENOSPC,
    EDQUOT), a read-only or lost filesystem (EROFS, EIO), no permission. What was committed before
    stays; the runs that were not stored are not done, and the next command runs them."""

    def __init__(self, root: str, cause: OSError, unsaved: int = 0) -> None:
        self.root, self.cause, self.unsaved = root, cause, unsaved
        super().__init__(str(self))

    def __str__(self) -> str:
        code = errno.errorcode.get(self.cause.errno or 0)
        reason = os.strerror(self.cause.errno) if self.cause.errno else str(self.cause).splitlines()[0]
        what = f"{reason} ({code})" if code else reason
        lost = (
            f"; {self.unsaved} finished runs were not stored: they are not done, and the same command runs them again"
            if self.unsaved
            else ""
        )
        return (
            f"cannot write the results store {redact(self.root)}: {what}{lost}. Nothing half-written is visible "
            "(every change commits whole); fix the cause (free space, permissions) and run the same command again"
        )


class StoreWriteError(Exception):
    """Committing finished runs failed for a reason that is not theirs (a staged part lost, a fault of
    the flush itself): no run is stored as failed for it; those runs are not done, and the same command
    runs them again (issue 44)."""

    def __init__(self, root: str, cause: BaseException, unsaved: int) -> None:
        self.root, self.cause, self.unsaved = root, cause, unsaved
        super().__init__(str(self))

    def __str__(self) -> str:
        first = str(self.cause).splitlines()[0] if str(self.cause) else ""
        return (
            f"could not store {self.unsaved} finished runs in {redact(self.root)}: {type(self.cause).__name__}: "
            f"{clip(first, MESSAGE_CHARS // 2)}. They are not stored as failed: they are not done, and the same "
            "command runs them again (what was committed before stays)"
        )

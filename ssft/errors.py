"""User-facing errors: one line, no traceback, non-zero exit."""
from __future__ import annotations

import sys
from collections.abc import Callable
from functools import wraps


class SsftError(Exception):
    """A problem with the user's input (recipe, data, model name, file). Printed as one line."""


def closest(name: str, choices) -> str:
    """' (did you mean X?)' when a close match exists, else ''."""
    import difflib

    match = difflib.get_close_matches(name, list(choices), n=1)
    return f" (did you mean '{match[0]}'?)" if match else ""


def cli_entry(prog: str) -> Callable[[Callable[[list[str] | None], int]], Callable[[list[str] | None], int]]:
    """Wrap a CLI main: SsftError → 'prog: error: msg' on stderr and exit code 2."""

    def decorate(fn):
        @wraps(fn)
        def wrapper(argv: list[str] | None = None) -> int:
            try:
                return fn(argv) or 0
            except SsftError as err:
                print(f"{prog}: error: {err}", file=sys.stderr)
                return 2
            except KeyboardInterrupt:
                print(f"{prog}: interrupted", file=sys.stderr)
                return 130

        return wrapper

    return decorate

"""User-facing errors: one line, no traceback, non-zero exit."""
from __future__ import annotations

import difflib
import os
import sys
from collections.abc import Callable
from functools import wraps
from pathlib import Path


class SsftError(Exception):
    """A problem with the user's input (recipe, data, model name, file). Printed as one line."""


def closest(name: str, choices) -> str:
    """' (did you mean X?)' when a close match exists, else ''."""
    match = difflib.get_close_matches(name, list(choices), n=1)
    return f" (did you mean '{match[0]}'?)" if match else ""


def user_path(text: str) -> Path:
    """A path as a user typed it on the command line: ``~`` expanded (argparse ``type=``)."""
    return Path(os.path.expanduser(text))


def os_error_line(err: OSError) -> str:
    """One line for a failed system call: the file and the reason (disk full, read-only, permission ...)."""
    where = f"{err.filename}: " if err.filename else ""
    return f"{where}{err.strerror or err}"


def cli_entry(prog: str) -> Callable[[Callable[[list[str] | None], int]], Callable[[list[str] | None], int]]:
    """Wrap a CLI main: SsftError → 'prog: error: msg' on stderr and exit code 2; so is a failed system call
    (a full disk, a read-only folder): what was written atomically before it is complete, the rest absent."""

    def decorate(fn):
        @wraps(fn)
        def wrapper(argv: list[str] | None = None) -> int:
            try:
                return fn(argv) or 0
            except SsftError as err:
                print(f"{prog}: error: {err}", file=sys.stderr)
                return 2
            except OSError as err:
                print(f"{prog}: error: {os_error_line(err)}", file=sys.stderr)
                return 2
            except KeyboardInterrupt:
                print(f"{prog}: interrupted", file=sys.stderr)
                return 130

        return wrapper

    return decorate

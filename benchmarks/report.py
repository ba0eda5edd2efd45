"""BENCHMARKS.md is written by the benchmark scripts, one marked section each, so they don't overwrite each other.

Each section begins with its provenance line (``provenance()``: command, commit, CPU, date), which ``write_section``
puts under the section's title unless the body already has one.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "BENCHMARKS.md"
HEADER = ("# ssft benchmarks\n\nWritten by the scripts in `benchmarks/`, one section each; every section begins with its "
          "command, commit, CPU and date. Superseded runs: [BENCHMARKS_HISTORY.md](BENCHMARKS_HISTORY.md).\n")
PROVENANCE = "**Provenance**"
_ENV = ("SSFT_DATA_HOME", "OMP_NUM_THREADS", "SSFT_CPU_KERNELS")  # environment a benchmark command is often run with


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def commit() -> str:
    """The checkout's short commit, saying so when tracked files differ from it."""
    head = _git("rev-parse", "--short=7", "HEAD") or "unknown"
    return head + (" + uncommitted changes" if _git("status", "--porcelain", "--untracked-files=no") else "")


def cpu() -> str:
    """CPU model, its bf16 support (avx512_bf16, amx_bf16) and core count; the GPU too when torch sees one."""
    info = Path("/proc/cpuinfo")
    text = info.read_text() if info.is_file() else ""
    model = next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")), "")
    flags = set(text.split())
    bf16 = [f for f in ("avx512_bf16", "amx_bf16") if f in flags]
    if text:
        bf16.append("no AMX" if "amx_bf16" not in flags else "")
    features = ", ".join(f for f in bf16 if f)
    line = f"{model or platform.processor() or platform.machine()}" + (f" ({features})" if features else "")
    line += f", {os.cpu_count()} cores"
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        line += f"; GPU: {torch.cuda.get_device_name(0)}"
    return line


def _script() -> str:
    if sys.argv[0] in ("", "-c"):
        return "-c …"
    script = Path(sys.argv[0]).resolve()
    return str(script.relative_to(ROOT) if script.is_relative_to(ROOT) else script)


def command() -> str:
    """The command line of this process, as run from the repository root."""
    env = [f"{k}={shlex.quote(os.environ[k])}" for k in _ENV if k in os.environ]
    return " ".join([*env, "python", _script(), *map(shlex.quote, sys.argv[1:])])


def provenance(cmd: str | None = None, note: str = "") -> str:
    """One line: the command that wrote the section (``note`` after it), the commit, the CPU and the date (UTC)."""
    today = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    return f"{PROVENANCE} — command: `{cmd or command()}`{note} · commit: {commit()} · CPU: {cpu()} · date: {today}"


def with_provenance(body: str) -> str:
    """``body`` with a provenance line under its title (``## ...``), unless it has one. A long command that the body
    states in full anyway is shortened to the script's name."""
    if PROVENANCE in body:
        return body
    cmd, note = command(), ""
    if len(cmd) > 160 and Path(_script()).name in body:
        cmd, note = f"python {_script()} …", " (full command in the section)"
    line = provenance(cmd, note)
    head, _, rest = body.partition("\n")
    if head.startswith("## "):
        return f"{head}\n\n{line}\n" + (rest if rest.startswith("\n") else f"\n{rest}")
    return f"{line}\n\n{body}"


def _existing_file(value: str) -> Path:
    path = Path(value)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{value}: no such file")
    return path


def add_section_options(parser: argparse.ArgumentParser, section: str, title: str | None = None) -> None:
    """``--section NAME`` (default ``section``): the BENCHMARKS.md section ``--write`` replaces, so a run of other
    models or a subset can go to a section of its own; with a default ``title``, also ``--title`` (without ``## ``)."""
    parser.add_argument("--section", default=section, help="the BENCHMARKS.md section --write replaces")
    if title is not None:
        parser.add_argument("--title", default=title, help="the section's title")


def add_notes_option(parser: argparse.ArgumentParser) -> None:
    """``--notes FILE``: a Markdown file of readings that ``with_notes`` appends to the section; checked when the
    command line is parsed, so a wrong name fails before hours of measuring, not after."""
    parser.add_argument("--notes", type=_existing_file, default=None,
                        help="a Markdown file of readings appended to the section")


def with_notes(body: str, notes: Path | str | None) -> str:
    """``body`` followed by the Markdown file ``notes`` (the section's readings) after one blank line; ``body`` alone
    for ``None``. A file that is not there is a one-line error naming it, before anything is written."""
    if notes is None:
        return body
    path = Path(notes)
    if not path.is_file():
        raise SystemExit(f"--notes: {path}: no such file")
    return f"{body.rstrip()}\n\n{path.read_text().strip()}\n"


def write_section(name: str, body: str, provenance_line: bool = True) -> None:
    begin, end = f"<!-- begin {name} -->", f"<!-- end {name} -->"
    if provenance_line:
        body = with_provenance(body)
    text = BENCHMARKS.read_text() if BENCHMARKS.exists() else HEADER
    block = f"{begin}\n{body.rstrip()}\n{end}"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        text = head + block + tail
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    tmp = BENCHMARKS.with_suffix(".md.tmp")
    tmp.write_text(text)
    tmp.replace(BENCHMARKS)

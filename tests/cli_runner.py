"""Run the CLIs (ssft-train, ssft-rerank, ssft-sweep) as separate processes, cheaply.

``python -m ssft.train`` spends ~6 s importing torch / transformers / peft before it looks at its input; a matrix
of tens of bad inputs would spend minutes on imports. Here a forkserver process imports those once; each call is
a process forked from it that changes to its own working directory, runs the CLI's ``main(argv)`` with stdout and
stderr going to files, and exits with main's return code -- an uncaught exception prints its traceback and exits
1, as the interpreter would. (tests/cli/test_cli.py and a few cases of the matrix call ``python -m`` for real.)
"""
from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

PRELOAD = ["ssft.cli.train", "ssft.cli.rerank", "ssft.cli.sweep", "ssft.training.trainer", "ssft.adapters", "ssft.models",
           "ssft.losses",
           "ssft.training.callbacks", "transformers.training_args", "transformers.trainer"]

_context = None


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


def _context_once():
    global _context
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(PRELOAD)
    return _context


def _child(module: str, argv: list[str], cwd: str, env: dict[str, str], out_path: str, err_path: str) -> None:
    import importlib
    import traceback

    os.chdir(cwd)
    os.environ.update(env)
    sys.stdout.flush()
    sys.stderr.flush()
    out_fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    err_fd = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(out_fd, 1)
    os.dup2(err_fd, 2)
    code = 1
    try:
        code = importlib.import_module(module).main(argv) or 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # what the interpreter does with an uncaught exception
        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def start_cli(module: str, argv: list[str], cwd: Path, env: dict[str, str] | None = None):
    """Start a forked CLI run and return its ``multiprocessing.Process`` (``.pid``, ``.kill()`` sends SIGKILL);
    its output is discarded."""
    env = {**os.environ, **{k: str(v) for k, v in (env or {}).items()}}  # this test's environment, not the server's
    process = _context_once().Process(target=_child, args=(module, argv, str(cwd), env, os.devnull, os.devnull))
    process.start()
    return process


def run_cli(module: str, argv: list[str], cwd: Path, env: dict[str, str] | None = None, real: bool = False,
            timeout: float = 300) -> Result:
    """Run ``python -m module argv`` in ``cwd`` (``real``: an actual interpreter; else forked, see above)."""
    env = {**os.environ, **{k: str(v) for k, v in (env or {}).items()}}  # this test's environment, not the server's
    if real:
        done = subprocess.run([sys.executable, "-m", module, *argv], cwd=cwd, env=env,
                              capture_output=True, text=True, timeout=timeout)
        return Result(done.returncode, done.stdout, done.stderr)
    with tempfile.TemporaryDirectory(prefix="ssft-cli-") as logs:
        out_path, err_path = os.path.join(logs, "stdout"), os.path.join(logs, "stderr")
        process = _context_once().Process(target=_child, args=(module, argv, str(cwd), env, out_path, err_path))
        process.start()
        process.join(timeout)
        if process.exitcode is None:
            process.kill()
            process.join()
            raise TimeoutError(f"{module} {argv} ran past {timeout} s")
        return Result(process.exitcode, Path(out_path).read_text(), Path(err_path).read_text())

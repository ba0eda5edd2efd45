"""benchmarks/report.py: a section's readings (``--notes``) are appended the same way by every benchmark script, and a
notes file that is not there fails when the command line is parsed, before anything is measured or written."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import report  # noqa: E402


def test_notes_follow_the_body_after_one_blank_line(tmp_path):
    notes = tmp_path / "notes.md"
    notes.write_text("\n\nReading: the grouped arm is level.\n\n\n")
    expected = "## Title\n\n| a |\n|---|\n\nReading: the grouped arm is level.\n"
    assert report.with_notes("## Title\n\n| a |\n|---|\n\n", notes) == expected
    assert report.with_notes("## Title\n", str(notes)).endswith("## Title\n\nReading: the grouped arm is level.\n")


def test_no_notes_leaves_the_body_as_it_is():
    assert report.with_notes("## Title\n\nbody  \n", None) == "## Title\n\nbody  \n"


def test_a_missing_notes_file_is_a_one_line_error(tmp_path):
    with pytest.raises(SystemExit, match=r"--notes: .*absent\.md: no such file"):
        report.with_notes("body", tmp_path / "absent.md")


def test_the_option_checks_the_file_when_parsed(tmp_path, capsys):
    parser = argparse.ArgumentParser(prog="bench.py")
    report.add_notes_option(parser)
    notes = tmp_path / "notes.md"
    notes.write_text("x")
    assert parser.parse_args(["--notes", str(notes)]).notes == notes
    assert parser.parse_args([]).notes is None
    with pytest.raises(SystemExit) as exit_info:
        parser.parse_args(["--notes", str(tmp_path / "absent.md")])
    assert exit_info.value.code == 2
    assert "argument --notes: " in capsys.readouterr().err

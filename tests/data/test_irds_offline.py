"""An ir_datasets id offline: refused in one line before ir_datasets tries the network, nothing created; a download
that fails online names the failure plainly (not the transport's text) and leaves no empty folders behind. ir_datasets
itself is stood in for by a module that behaves as it does (its registry, its home, a download that fails)."""
from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from ssft.core.errors import SsftError
from ssft.data.beir import load_dataset


class _NameResolutionError(OSError):
    """urllib3's: what a download without a network raises, its text full of hosts and pools."""


def _fake_ir_datasets(home, monkeypatch) -> list[str]:
    calls: list[str] = []

    class Dataset:
        def has_docs(self):
            return True

        has_queries = has_qrels = has_docs

        def docs_iter(self):
            calls.append("download")
            for part in ("beir/scifact", "beir/scifact/tmp", "downloads"):
                (home / part).mkdir(parents=True, exist_ok=True)  # what a first download creates before it fails
            raise ConnectionError("HTTPSConnectionPool(host='x', port=443): Max retries exceeded") from \
                _NameResolutionError("Failed to resolve 'x'")
            yield  # pragma: no cover

        queries_iter = qrels_iter = docs_iter

    module = types.ModuleType("ir_datasets")
    module.__version__ = "0.0-test"
    module.registry = {"beir/scifact/test": object()}
    module.load = lambda dataset_id: Dataset()
    module.util = types.SimpleNamespace(home_path=lambda: str(home))
    monkeypatch.setitem(sys.modules, "ir_datasets", module)
    return calls


def _refused_load(tmp_path, monkeypatch, offline: str) -> tuple[list, Path, str]:
    """Load an ir_datasets id through the stand-in with HF_HUB_OFFLINE=``offline``: (its download calls, its home
    folder, the one-line error the load raised)."""
    home = tmp_path / "irds"
    home.mkdir()
    calls = _fake_ir_datasets(home, monkeypatch)
    monkeypatch.setenv("HF_HUB_OFFLINE", offline)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SsftError) as err:
        load_dataset("beir/scifact/test")
    return calls, home, str(err.value)


def test_an_ir_datasets_id_offline_is_refused_before_any_download(tmp_path, monkeypatch):
    calls, home, message = _refused_load(tmp_path, monkeypatch, "1")
    assert "not downloaded" in message and "HF_HUB_OFFLINE" in message and "\n" not in message
    assert calls == [] and list(home.iterdir()) == []


def test_a_failed_first_download_names_the_failure_and_leaves_no_folders(tmp_path, monkeypatch):
    calls, home, message = _refused_load(tmp_path, monkeypatch, "0")
    assert calls and "no network connection" in message and "HTTPSConnectionPool" not in message
    assert list(home.iterdir()) == []

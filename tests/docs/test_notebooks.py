"""Every notebook in notebooks/ executes headless (nbclient, the python3 kernel ipykernel installs) with small
settings (SSFT_NOTEBOOK_SMALL=1) on real data and weights, and leaves its figures as PNG files."""
import os
from pathlib import Path

import pytest

from tests.conftest import SHARED_DATA

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))
# the PNG files each notebook must leave (a notebook missing here fails: say what it draws)
FIGURES = {
    "ambiguity_analysis": ["fig3_ambiguity_ratio.senses.png", "fig3_ambiguity_ratio.confidence.png"],
    "hybrid_curves": ["fig4_hybrid_curves.png"],
    "collapse_daft": ["collapse_daft_pca.png", "collapse_daft_monitor.png"],
    "latency_tradeoff": ["fig6_latency_tradeoff.png"],
    "tutorial": ["tutorial_eval.png"],  # the model against BM25 (ssft.evaluate's eval.png)
}


def test_every_notebook_is_listed():
    assert sorted(nb.stem for nb in NOTEBOOKS) == sorted(FIGURES)


@pytest.mark.integration
@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_executes(notebook, tmp_path, monkeypatch, wordnet_dir):
    import nbformat
    from nbclient import NotebookClient

    repo = Path(__file__).resolve().parents[2]
    out = tmp_path / "figures"
    # the kernel is a subprocess: it inherits these
    monkeypatch.setenv("SSFT_NOTEBOOK_SMALL", "1")
    monkeypatch.setenv("SSFT_NOTEBOOK_OUT", str(out))
    monkeypatch.setenv("SSFT_NOTEBOOK_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("SSFT_DATA_HOME", os.environ.get("SSFT_DATA_HOME") or str(SHARED_DATA))
    monkeypatch.setenv("WN_DATA_DIR", wordnet_dir)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(repo), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(notebook, as_version=4)
    client = NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError with the failing cell's traceback
    errors = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors
    for name in FIGURES[notebook.stem]:
        png = out / name
        assert png.is_file(), f"{notebook.name} did not write {name}"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

"""Datasets read from the Hugging Face Hub layouts (BeIR, MTEB) and from ir_datasets give the same IRDataset as the BEIR
folder they were built from: same ids, texts and judgements.

The hub cannot be reached here, so each layout is a local copy of a repository laid out as the hub's is (the
repository's files and its README.md, which declares the configurations), as ``huggingface-cli download`` leaves it:

- BeIR (dataset cards of BeIR/nfcorpus and BeIR/nfcorpus-qrels): configurations ``corpus`` (split ``corpus``) and
  ``queries`` (split ``queries``), Parquet files ``corpus/<name>-corpus.parquet`` and ``queries/<name>-queries.parquet``
  with columns ``_id``, ``title``, ``text``; the companion ``<name>-qrels`` repository holds ``train.tsv``, ``dev.tsv``,
  ``test.tsv`` (``query-id``, ``corpus-id``, ``score``) and no configurations.
- MTEB (dataset card of mteb/nfcorpus): configurations ``default`` (splits train / dev / test from
  ``qrels/<split>.jsonl``; ``query-id``, ``corpus-id`` string, ``score`` float64), ``corpus`` (``corpus.jsonl``;
  ``_id``, ``title``, ``text``) and ``queries`` (``queries.jsonl``; ``_id``, ``text``).
- ir_datasets: a dataset registered from the BEIR files with ir_datasets' own BEIR classes (``BeirDocs``,
  ``BeirQueries``, ``BeirQrels``: what ``beir/<name>/<split>`` ids use).
"""
from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

import pytest

from ssft.core.errors import SsftError
from ssft.data.beir import dataset_identity, load_dataset


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _numeric_beir(root: Path) -> Path:
    """A BEIR folder with SciFact-like numeric ids (read as integers by datasets' TSV reader) and an empty title."""
    (root / "qrels").mkdir(parents=True)
    docs = {"4983": ("Microstructural development", "brain white matter in preterm infants"),
            "5836": ("", "induction of myelodysplasia by mutations"),
            "31715818": ("Bone density", "vitamin d supplementation and fractures"),
            "7912": ("Sleep", "sleep loss and insulin resistance")}
    with open(root / "corpus.jsonl", "w") as fh:
        for i, (t, x) in docs.items():
            fh.write(json.dumps({"_id": i, "title": t, "text": x, "metadata": {}}) + "\n")
    with open(root / "queries.jsonl", "w") as fh:
        for i, t in {"1": "white matter in infants", "3": "vitamin d and fractures", "5": "sleep and insulin"}.items():
            fh.write(json.dumps({"_id": i, "text": t, "metadata": {}}) + "\n")
    (root / "qrels" / "train.tsv").write_bytes(b"query-id\tcorpus-id\tscore\r\n1\t4983\t1\r\n5\t7912\t1\r\n")
    (root / "qrels" / "test.tsv").write_bytes(b"query-id\tcorpus-id\tscore\r\n3\t31715818\t1\r\n5\t7912\t1\r\n")
    return root


@pytest.fixture(params=["tiny", "numeric"])
def beir_folder(request, tiny_dataset, tmp_path) -> Path:
    return tiny_dataset if request.param == "tiny" else _numeric_beir(tmp_path / "numeric")


def _splits(folder: Path) -> list[str]:
    return sorted(p.name.split(".tsv")[0] for p in (folder / "qrels").glob("*.tsv"))


def write_beir_hub(folder: Path, root: Path) -> Path:
    """``root/BeIR/<name>`` and ``root/BeIR/<name>-qrels`` as the hub repositories are."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    name = folder.name
    repo = root / "BeIR" / name
    (repo / "corpus").mkdir(parents=True)
    (repo / "queries").mkdir()
    docs = _jsonl(folder / "corpus.jsonl")
    queries = _jsonl(folder / "queries.jsonl")
    pq.write_table(pa.table({"_id": [d["_id"] for d in docs], "title": [d.get("title", "") for d in docs],
                             "text": [d.get("text", "") for d in docs]}), repo / "corpus" / f"{name}-corpus.parquet")
    pq.write_table(pa.table({"_id": [q["_id"] for q in queries], "title": ["" for _ in queries],
                             "text": [q["text"] for q in queries]}), repo / "queries" / f"{name}-queries.parquet")
    (repo / "README.md").write_text(f"""---
language:
- en
license: cc-by-sa-4.0
task_categories:
- text-retrieval
dataset_info:
- config_name: corpus
  features:
  - name: _id
    dtype: string
  - name: title
    dtype: string
  - name: text
    dtype: string
- config_name: queries
  features:
  - name: _id
    dtype: string
  - name: title
    dtype: string
  - name: text
    dtype: string
configs:
- config_name: corpus
  data_files:
  - split: corpus
    path: corpus/{name}-corpus.parquet
- config_name: queries
  data_files:
  - split: queries
    path: queries/{name}-queries.parquet
---

# Dataset Card for BEIR Benchmark
""")
    qrels = root / "BeIR" / f"{name}-qrels"
    qrels.mkdir()
    for split in _splits(folder):  # the BEIR files as they are (CRLF included)
        shutil.copyfile(folder / "qrels" / f"{split}.tsv", qrels / f"{split}.tsv")
    (qrels / "README.md").write_text("---\nlanguage:\n- en\nlicense: cc-by-sa-4.0\n---\n\n# Dataset Card for BEIR Benchmark\n")
    return repo


def write_mteb_hub(folder: Path, root: Path) -> Path:
    """``root/mteb/<name>`` as the hub repository is."""
    name = folder.name
    repo = root / "mteb" / name
    (repo / "qrels").mkdir(parents=True)
    with open(repo / "corpus.jsonl", "w") as fh:
        for d in _jsonl(folder / "corpus.jsonl"):
            fh.write(json.dumps({"_id": d["_id"], "title": d.get("title", ""), "text": d.get("text", "")}) + "\n")
    with open(repo / "queries.jsonl", "w") as fh:
        for q in _jsonl(folder / "queries.jsonl"):
            fh.write(json.dumps({"_id": q["_id"], "text": q["text"]}) + "\n")
    splits = _splits(folder)
    for split in splits:
        lines = (folder / "qrels" / f"{split}.tsv").read_text().splitlines()[1:]
        with open(repo / "qrels" / f"{split}.jsonl", "w") as fh:
            for line in lines:
                q, d, s = line.split("\t")
                fh.write(json.dumps({"query-id": q, "corpus-id": d, "score": float(s)}) + "\n")
    split_files = "".join(f"  - split: {s}\n    path: qrels/{s}.jsonl\n" for s in splits)
    (repo / "README.md").write_text(f"""---
language:
- en
multilinguality:
- monolingual
task_categories:
- text-retrieval
source_datasets:
- {name}
task_ids:
- document-retrieval
config_names:
- corpus
tags:
- text-retrieval
dataset_info:
- config_name: default
  features:
  - name: query-id
    dtype: string
  - name: corpus-id
    dtype: string
  - name: score
    dtype: float64
- config_name: corpus
  features:
  - name: _id
    dtype: string
  - name: title
    dtype: string
  - name: text
    dtype: string
- config_name: queries
  features:
  - name: _id
    dtype: string
  - name: text
    dtype: string
configs:
- config_name: default
  data_files:
{split_files}- config_name: corpus
  data_files:
  - split: corpus
    path: corpus.jsonl
- config_name: queries
  data_files:
  - split: queries
    path: queries.jsonl
---
""")
    return repo


def register_ir_datasets(folder: Path, split: str) -> str:
    """An ir_datasets id for the BEIR folder, built with ir_datasets' own BEIR classes."""
    ir_datasets = pytest.importorskip("ir_datasets")
    from ir_datasets.datasets.base import Dataset
    from ir_datasets.datasets.beir import BeirDocs, BeirQrels, BeirQueries, BeirTitleDoc
    from ir_datasets.formats import GenericQuery
    from ir_datasets.util import LocalDownload

    name = f"ssft-test-{uuid.uuid4().hex[:8]}"
    dataset_id = f"{name}/{split}"
    ir_datasets.registry.register(dataset_id, Dataset(
        BeirDocs(name, LocalDownload(folder / "corpus.jsonl"), BeirTitleDoc),
        BeirQueries(name, LocalDownload(folder / "queries.jsonl"), GenericQuery),
        BeirQrels(LocalDownload(folder / "qrels" / f"{split}.tsv"), qrels_defs={})))
    return dataset_id


@pytest.fixture(autouse=True)
def _own_caches(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf-datasets"))
    monkeypatch.setenv("IR_DATASETS_HOME", str(tmp_path / "ir_datasets"))


def assert_same(got, want, splits: list[str] | None = None) -> None:
    """Same documents (ids, titles, texts), queries and judgements of every split."""
    assert got.corpus == want.corpus
    assert got.queries == want.queries
    for split in splits if splits is not None else want.splits():
        assert got.qrels(split) == want.qrels(split), split


def test_beir_hub_copy_reads_as_its_beir_folder(beir_folder, tmp_path):
    repo = write_beir_hub(beir_folder, tmp_path / "hub")
    got, want = load_dataset(str(repo)), load_dataset(str(beir_folder))
    assert got.splits() == want.splits()  # dev, not datasets' 'validation'
    assert_same(got, want)
    if "dev" in want.splits():
        assert got.qrels("validation") == want.qrels("dev")  # datasets' name for it answers too
    identity = dataset_identity(got)
    assert identity["layout"] == "hub-beir" and identity["revision"] and identity["qrels_revision"]
    assert identity["qrels_id"].endswith(f"{beir_folder.name}-qrels")


def test_mteb_hub_copy_reads_as_its_beir_folder(beir_folder, tmp_path):
    repo = write_mteb_hub(beir_folder, tmp_path / "hub")
    got, want = load_dataset(str(repo)), load_dataset(str(beir_folder))
    assert got.splits() == want.splits()
    assert_same(got, want)
    identity = dataset_identity(got)
    assert identity["layout"] == "hub-mteb" and identity["revision"] and identity["path"] == str(repo)


def test_beir_copy_in_the_hub_cache_layout(tiny_dataset, tmp_path):
    """A snapshot folder of the Hugging Face hub cache (``datasets--BeIR--<name>/snapshots/<commit>``, as
    ``huggingface_hub.snapshot_download`` leaves it) finds its qrels in the companion's snapshot that refs/main names."""
    copies = tmp_path / "copies"
    write_beir_hub(tiny_dataset, copies)
    cache = tmp_path / "hub-cache"
    for repo, commit in (("tiny", "a" * 40), ("tiny-qrels", "b" * 40)):
        shutil.copytree(copies / "BeIR" / repo, cache / f"datasets--BeIR--{repo}" / "snapshots" / commit)
        (cache / f"datasets--BeIR--{repo}" / "refs").mkdir()
        (cache / f"datasets--BeIR--{repo}" / "refs" / "main").write_text(commit)
    (cache / "datasets--BeIR--tiny-qrels" / "snapshots" / ("c" * 40)).mkdir()  # another, older revision: not it
    got = load_dataset(str(cache / "datasets--BeIR--tiny" / "snapshots" / ("a" * 40)))
    assert_same(got, load_dataset(str(tiny_dataset)))
    assert dataset_identity(got)["qrels_id"].endswith("b" * 40) and got.name == "tiny"


def test_hub_copy_by_name_under_data_home(tiny_dataset, tmp_path, monkeypatch):
    write_mteb_hub(tiny_dataset, tmp_path / "hub")
    monkeypatch.setenv("SSFT_DATA_HOME", str(tmp_path / "hub"))
    assert_same(load_dataset("mteb/tiny"), load_dataset(str(tiny_dataset)))


def test_beir_folder_identity(tiny_dataset):
    identity = dataset_identity(load_dataset(str(tiny_dataset)))
    assert identity == {"layout": "beir-folder", "id": str(tiny_dataset), "revision": None,
                        "path": str(tiny_dataset.resolve())}


def test_ir_datasets_reads_as_its_beir_folder(beir_folder):
    for split in _splits(beir_folder):
        dataset_id = register_ir_datasets(beir_folder, split)
        got, want = load_dataset(dataset_id), load_dataset(str(beir_folder))
        # one id, one set of judgements: named after the id's split word, 'test' otherwise
        assert got.splits() == [split if split in ("train", "dev") else "test"]
        assert got.corpus == want.corpus
        # ir_datasets' beir/<name>/<split> ids hold the queries of that split's judgements only (as BEIR's own ids do)
        assert set(got.queries) <= set(want.queries)
        assert got.qrels(got.splits()[0]) == want.qrels(split)
        assert dataset_identity(got)["layout"] == "ir_datasets"
        assert load_dataset(f"irds:{dataset_id}").corpus == want.corpus


# ---------------------------------------------------------------- refusals: one line naming what exists


def test_missing_split_names_the_splits_there(tiny_dataset, tmp_path):
    for repo in (write_mteb_hub(tiny_dataset, tmp_path / "a"), write_beir_hub(tiny_dataset, tmp_path / "b")):
        dataset = load_dataset(str(repo))
        with pytest.raises(SsftError, match=r"no split 'eval' \(have: dev, test, train\)") as err:
            dataset.qrels("eval")
        assert "\n" not in str(err.value)


def test_missing_configuration_names_the_configurations_there(tiny_dataset, tmp_path):
    repo = write_mteb_hub(tiny_dataset, tmp_path / "hub")
    readme = (repo / "README.md").read_text()
    (repo / "README.md").write_text(readme.replace("- config_name: queries\n  data_files:\n  - split: queries\n"
                                                   "    path: queries.jsonl\n", ""))
    with pytest.raises(SsftError, match=r"neither the BeIR layout .* nor the MTEB layout .*it has the configurations "
                                        r"default, corpus$") as err:
        load_dataset(str(repo))
    assert "\n" not in str(err.value)


def test_missing_corpus_split_names_the_splits_there(tiny_dataset, tmp_path):
    repo = write_mteb_hub(tiny_dataset, tmp_path / "hub")
    shutil.copyfile(repo / "corpus.jsonl", repo / "corpus2.jsonl")
    readme = (repo / "README.md").read_text()
    (repo / "README.md").write_text(readme.replace("  - split: corpus\n    path: corpus.jsonl\n",
                                                   "  - split: first\n    path: corpus.jsonl\n"
                                                   "  - split: second\n    path: corpus2.jsonl\n"))
    with pytest.raises(SsftError, match=r"configuration corpus\): no split 'corpus' \(have: first, second\)"):
        load_dataset(str(repo))


def test_beir_copy_without_its_qrels_companion(tiny_dataset, tmp_path):
    repo = write_beir_hub(tiny_dataset, tmp_path / "hub")
    shutil.rmtree(repo.parent / "tiny-qrels")
    with pytest.raises(SsftError, match=r"companion repository; no folder .*tiny-qrels beside it"):
        load_dataset(str(repo))


def test_hub_columns_not_of_the_layout(tiny_dataset, tmp_path):
    repo = write_mteb_hub(tiny_dataset, tmp_path / "hub")
    for split in ("train", "dev", "test"):
        rows = [json.loads(line) for line in (repo / "qrels" / f"{split}.jsonl").read_text().splitlines()]
        (repo / "qrels" / f"{split}.jsonl").write_text("".join(json.dumps({"qid": r["query-id"], "doc": r["corpus-id"],
                                                                           "score": r["score"]}) + "\n" for r in rows))
    readme = (repo / "README.md").read_text()
    (repo / "README.md").write_text(readme.replace("  features:\n  - name: query-id\n    dtype: string\n  - name: corpus-id\n"
                                                   "    dtype: string\n  - name: score\n    dtype: float64\n", ""))
    with pytest.raises(SsftError, match=r"\(configuration default\) split \w+: no document id column \(expected "
                                        r"'corpus-id' or .*it has qid, doc, score\)"):
        load_dataset(str(repo))  # checked when the dataset is loaded, before anything runs


def test_hub_grade_that_is_not_a_whole_number(tiny_dataset, tmp_path):
    repo = write_mteb_hub(tiny_dataset, tmp_path / "hub")
    (repo / "qrels" / "test.jsonl").write_text(json.dumps({"query-id": "q6", "corpus-id": "d5", "score": 1.5}) + "\n")
    with pytest.raises(SsftError, match=r"configuration default\) split test row 1: score '1.5' is not an integer"):
        load_dataset(str(repo)).qrels("test")


def test_hub_unknown_ids_are_dropped_and_counted(tiny_dataset, tmp_path):
    repo = write_mteb_hub(tiny_dataset, tmp_path / "hub")
    with open(repo / "qrels" / "test.jsonl", "a") as fh:
        fh.write(json.dumps({"query-id": "q6", "corpus-id": "nope", "score": 1}) + "\n")
    dataset = load_dataset(str(repo))
    assert dataset.qrels("test") == load_dataset(str(tiny_dataset)).qrels("test")
    assert any("1 rows with unknown document ids (skipped)" in w for w in dataset.warnings)


def test_offline_hub_id_with_nothing_cached_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SsftError, match=r"dataset 'BeIR/nfcorpus': offline \(HF_HUB_OFFLINE=1\) and nothing of it is in "
                                        r"the datasets cache .*hf-datasets\); load it once with a network, or pass a "
                                        r"local copy .*no dataset folder at BeIR/nfcorpus.* either") as err:
        load_dataset("BeIR/nfcorpus")
    assert "\n" not in str(err.value)


def test_offline_hub_id_reads_the_datasets_cache(tiny_dataset, tmp_path, monkeypatch):
    """What ``datasets`` prepared online is what it reads offline: a prepared cache under ``<org>___<name>`` (made here
    from the local copies, whose prepared configurations have the same form) serves the hub ids."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    cache = tmp_path / "hf-datasets"
    for writer, org in ((write_beir_hub, "BeIR"), (write_mteb_hub, "mteb")):
        repo = writer(tiny_dataset, tmp_path / "hub")
        load_dataset(str(repo))  # prepares the local copy's configurations in the cache
        for prepared in ("tiny", "tiny-qrels"):
            if (cache / prepared).is_dir():
                shutil.move(cache / prepared, cache / f"{org}___{prepared}")
        got = load_dataset(f"{org}/tiny")
        assert_same(got, load_dataset(str(tiny_dataset)))
        assert dataset_identity(got)["layout"] == f"hub-{org.lower()}"
        assert dataset_identity(got)["path"] == str(cache / f"{org}___tiny")


def test_ir_datasets_unknown_id_and_missing_package(monkeypatch):
    pytest.importorskip("ir_datasets")
    with pytest.raises(SsftError, match=r"ir_datasets 'beir/nfcorpus/tset': not an ir_datasets id \(close: "
                                        r"beir/nfcorpus/test"):
        load_dataset("irds:beir/nfcorpus/tset")
    with pytest.raises(SsftError, match=r"ir_datasets 'beir/scifact' has no judgements \(qrels\); its subsets: "
                                        r"beir/scifact/test, beir/scifact/train"):
        load_dataset("beir/scifact")
    monkeypatch.setitem(__import__("sys").modules, "ir_datasets", None)
    with pytest.raises(SsftError, match=r"ir_datasets ids need the optional package ir_datasets: pip install"):
        load_dataset("irds:cranfield")


def test_ir_datasets_download_offline_is_one_line(tmp_path):
    pytest.importorskip("ir_datasets")
    import ir_datasets
    from ir_datasets.datasets.base import Dataset
    from ir_datasets.formats import TrecQrels, TsvDocs, TsvQueries
    from ir_datasets.util import LocalDownload

    missing = tmp_path / "not-downloaded"
    dataset_id = f"ssft-test-{uuid.uuid4().hex[:8]}/test"
    ir_datasets.registry.register(dataset_id, Dataset(TsvDocs(LocalDownload(missing / "docs.tsv", mkdir=False)),
                                                      TsvQueries(LocalDownload(missing / "queries.tsv", mkdir=False)),
                                                      TrecQrels(LocalDownload(missing / "qrels", mkdir=False), {})))
    with pytest.raises(SsftError, match=rf"ir_datasets '{dataset_id}': .*docs.tsv.* \(ir_datasets downloads into "
                                        r".*ir_datasets on first use") as err:
        load_dataset(dataset_id)
    assert "\n" not in str(err.value)


def test_beir_folders_still_win_over_hub_and_ir_datasets_names(tiny_dataset, tmp_path, monkeypatch):
    """A folder that is a BEIR folder is read as one even when a README declares configurations, and a BEIR folder
    named like a hub id under $SSFT_DATA_HOME is found there without asking the hub."""
    (tiny_dataset / "README.md").write_text("---\nconfigs:\n- config_name: corpus\n  data_files: corpus.jsonl\n---\n")
    assert dataset_identity(load_dataset(str(tiny_dataset)))["layout"] == "beir-folder"
    home = tmp_path / "home"
    shutil.copytree(tiny_dataset, home / "BeIR" / "tiny")
    monkeypatch.setenv("SSFT_DATA_HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert dataset_identity(load_dataset("BeIR/tiny"))["layout"] == "beir-folder"


def test_training_on_a_hub_copy_gives_the_beir_folders_run(tmp_path, tiny_dataset, tiny_model_dir):
    """data.dataset takes a hub layout too: the same recipe trains and scores the same on the BeIR copy as on the
    BEIR folder it was built from."""
    from ssft.cli.train import main

    repo = write_beir_hub(tiny_dataset, tmp_path / "hub")
    metrics = {}
    for name, data in (("folder", tiny_dataset), ("hub", repo)):
        recipe = tmp_path / f"{name}.yaml"
        recipe.write_text(f"model: {{name: {tiny_model_dir}, max_length: 48}}\nadapter: {{method: lora, r: 4}}\n"
                          f"data: {{dataset: {data}, num_negatives: 2, negatives_depth: 6}}\neval: {{depth: 6}}\n"
                          f"training: {{output_dir: {tmp_path / f'run-{name}'}, num_train_epochs: 1, "
                          f"per_device_train_batch_size: 2}}\n")
        assert main([str(recipe)]) == 0
        metrics[name] = json.loads((tmp_path / f"run-{name}" / "metrics.json").read_text())
        identity = json.loads((tmp_path / f"run-{name}" / "run_info.json").read_text())["dataset"]
        assert identity["layout"] == ("beir-folder" if name == "folder" else "hub-beir"), identity
    assert metrics["hub"] == metrics["folder"]


def test_hub_judged_query_with_empty_text(tiny_dataset, tmp_path):
    repo = write_mteb_hub(tiny_dataset, tmp_path / "hub")
    rows = [json.loads(line) for line in (repo / "queries.jsonl").read_text().splitlines()]
    (repo / "queries.jsonl").write_text("".join(json.dumps({**r, "text": "" if r["_id"] == "q6" else r["text"]}) + "\n"
                                                for r in rows))
    with pytest.raises(SsftError, match=r"configuration default\) split test: query 'q6' has empty text in .*mteb/tiny "
                                        r"\(configuration queries\) \(1 such queries\)"):
        load_dataset(str(repo)).qrels("test")


def test_check_finds_a_hub_copy_and_names_hub_and_ir_datasets_ids(tiny_dataset, tmp_path):
    """ssft-train --check: a local copy in a hub layout is here; a hub or ir_datasets id that is not a folder is
    'not here' with where it comes from, never 'no BEIR folder'."""
    from ssft.pipeline.check import dataset_status

    repo = write_beir_hub(tiny_dataset, tmp_path / "hub")
    assert dataset_status(str(repo)).where is not None
    for name, origin in (("BeIR/no-such-set", "hub dataset id"), ("irds:beir/no-such-set", "ir_datasets id")):
        found = dataset_status(name)
        assert found.where is None and origin in found.note and not found.fatal, found
    for path in (str(tmp_path / "a" / "b" / "missing"), "./a/b/missing", "~/a/b/missing"):  # a path is never an id
        found = dataset_status(path)
        assert found.where is None and found.fatal and "no BEIR folder" in found.note, found
    assert "ir_datasets id" in dataset_status("beir/no-such-set/test").note

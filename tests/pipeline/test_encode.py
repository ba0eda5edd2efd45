"""Corpus encoding as its own step (ssft-encode): sharded over processes, float16 shards, resumable after a kill; a
faiss index built once, saved, reloaded (memory-mapped) with the same top-k; ssft-retrieve --index-dir."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp

from ssft.config.recipe import ModelConfig
from ssft.core import precision
from ssft.data.beir import load_dataset
from ssft.models import corpus
from ssft.models.corpus import corpus_units, encode_shards, read_manifest, read_shards
from ssft.models.dense import DenseDualEncoder
from tests.helpers import write_synthetic_beir


def _dense(model_dir):
    torch.manual_seed(0)
    cfg = ModelConfig(architecture="dense", name=str(model_dir), max_length=48)
    return DenseDualEncoder.build(cfg, "full", {}).eval().requires_grad_(False)


def _vectors(folder):
    manifest = read_manifest(folder)
    return np.concatenate([np.asarray(s) for s in read_shards(folder, manifest)])


def _encode_as_rank(rank: int, world: int, init_file: str, model_dir: str, data: str, out: str) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    real, calls = corpus.encode_corpus, []
    corpus.encode_corpus = lambda m, t, batch_size=64: calls.append(len(t)) or real(m, t, batch_size)
    try:
        ids, texts = corpus_units(load_dataset(data))
        encode_shards(_dense(model_dir), ids, texts, out, shard_size=7, batch_size=4)
        (Path(out) / f"rank{rank}.json").write_text(json.dumps(calls))  # the shards this process encoded
    finally:
        corpus.encode_corpus = real
        dist.destroy_process_group()


def test_two_processes_write_the_vectors_one_process_writes(tiny_model_dir, tmp_path):
    data = write_synthetic_beir(tmp_path / "data", queries=6, docs=40)
    ids, texts = corpus_units(load_dataset(str(data)))
    single = encode_shards(_dense(tiny_model_dir), ids, texts, tmp_path / "one", shard_size=7, batch_size=4)
    assert single["shards"] == 6 and single["precision"] == "fp32"
    # two fresh interpreters: a process forked from this one inherits the thread pools of whatever ran here before
    # (OpenVINO's hangs the child at exit)
    mp.start_processes(_encode_as_rank, args=(2, str(tmp_path / "init"), str(tiny_model_dir), str(data), str(tmp_path / "two")),
                       nprocs=2, join=True, start_method="spawn")
    # each process encoded its own half of the 6 shards (7 documents each, the last 5)
    assert [json.loads((tmp_path / "two" / f"rank{r}.json").read_text()) for r in (0, 1)] == [[7, 7, 7], [7, 7, 5]]
    one, two = _vectors(tmp_path / "one"), _vectors(tmp_path / "two")
    assert one.dtype == np.float16 and one.shape == (40, 32)
    np.testing.assert_allclose(two.astype(np.float32), one.astype(np.float32), atol=2e-3)
    assert read_manifest(tmp_path / "two")["unit_ids"] == ids
    reference = _dense(tiny_model_dir)
    exact = corpus.encode_corpus(reference, texts)
    np.testing.assert_allclose(one.astype(np.float32), exact, atol=2e-3)  # float16 of the float32 vectors


def test_a_killed_encoding_resumes_with_the_shards_left(tiny_model_dir, tmp_path, monkeypatch):
    data = write_synthetic_beir(tmp_path / "data", queries=6, docs=30)
    ids, texts = corpus_units(load_dataset(str(data)))
    model = _dense(tiny_model_dir)
    real = corpus.encode_corpus
    calls = []

    def killed_after_two(m, t, batch_size=64):
        if len(calls) == 2:
            raise KeyboardInterrupt  # the run is killed while encoding its third shard
        calls.append(len(t))
        return real(m, t, batch_size)

    monkeypatch.setattr(corpus, "encode_corpus", killed_after_two)
    with pytest.raises(KeyboardInterrupt):
        encode_shards(model, ids, texts, tmp_path / "enc", shard_size=8)
    assert sorted(p.name for p in (tmp_path / "enc" / "shards").iterdir()) == ["00000.json", "00000.npy", "00001.json",
                                                                                "00001.npy"]  # each with its checksum
    # a shard cut short by the kill (a partial write under its final name) counts as absent
    np.save(tmp_path / "enc" / "shards" / "00002.npy", np.zeros((3, 32), dtype=np.float16))
    calls.clear()
    monkeypatch.setattr(corpus, "encode_corpus", lambda m, t, batch_size=64: calls.append(len(t)) or real(m, t, batch_size))
    manifest = encode_shards(model, ids, texts, tmp_path / "enc", shard_size=8)
    assert calls == [8, 6]  # shards 2 and 3 only
    assert manifest["shards"] == 4
    np.testing.assert_allclose(_vectors(tmp_path / "enc").astype(np.float32), real(model, texts), atol=2e-3)
    # another model's shards are never mixed in
    other = _dense(tiny_model_dir)
    with torch.no_grad():
        next(other.parameters()).add_(0.1)
    with pytest.raises(Exception, match="holds shards of another encoding \\(model differs\\)"):
        encode_shards(other, ids, texts, tmp_path / "enc", shard_size=8)


@pytest.mark.parametrize("kind", ["flat", "hnsw", "ivf", "ivfpq"])
def test_a_saved_index_reloads_with_the_same_top_k(kind, tmp_path):
    faiss = pytest.importorskip("faiss")
    from ssft.eval.index import INDEX_FILE, build_saved_index, load_index

    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((600, 32)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    folder = tmp_path / "idx"
    ids = [f"d{i}" for i in range(600)]
    manifest = {"format": corpus.SHARDS_FORMAT, "model": "m", "precision": "fp32", "corpus": "c", "units": 600,
                "shard_size": 200, "settings": {}, "unit_ids": ids}
    for shard in range(3):
        corpus.write_shard(folder, shard, vectors[shard * 200 : (shard + 1) * 200], manifest)
    (folder / "encode.json").write_text(json.dumps(manifest))
    info = build_saved_index(folder, kind, nprobe=4)
    queries = rng.standard_normal((10, 32)).astype(np.float32)
    built = faiss.read_index(str(folder / INDEX_FILE))  # the index as written, read whole
    if kind in ("ivf", "ivfpq"):
        faiss.extract_index_ivf(built).nprobe = 4
    if kind == "hnsw":
        faiss.downcast_index(built).hnsw.efSearch = info["ef_search"]
    expected = built.search(queries, 10)
    saved = load_index(folder)  # memory-mapped
    got = saved.search(queries, 10)
    np.testing.assert_array_equal(got[1], expected[1])
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-5)
    assert saved.unit_ids == ids and info["vectors"] == 600
    if kind in ("ivf", "ivfpq"):  # the inverted lists stay on disk, memory-mapped
        invlists = faiss.downcast_InvertedLists(faiss.extract_index_ivf(saved.index).invlists)
        assert type(invlists).__name__ == "OnDiskInvertedLists"
    if kind == "flat":  # exact: the true top-10 of the float16 vectors
        exact = np.argsort(-(vectors.astype(np.float16).astype(np.float32) @ queries.T).T, axis=1)[:, :10]
        np.testing.assert_array_equal(got[1], exact)


def _clustered(n: int, dim: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((20, dim))
    vectors = centres[rng.integers(0, 20, n)] + 0.6 * rng.standard_normal((n, dim))
    return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)


def test_calibrated_nprobe_finds_the_target_share_of_the_exact_top_k_with_fewer_lists():
    faiss = pytest.importorskip("faiss")
    from ssft.eval.index import CALIBRATION_RECALL, calibrate_nprobe, probe_counts

    assert probe_counts(10) == [1, 2, 3, 4, 6, 8, 10] and probe_counts(1) == [1]
    vectors = _clustered(4000, 32)
    index = faiss.index_factory(32, "IVF64,Flat", faiss.METRIC_INNER_PRODUCT)
    index.train(vectors)
    index.add(vectors)
    nprobe, recall = calibrate_nprobe(index, vectors, k=50)
    assert 1 < nprobe < 64 and recall >= CALIBRATION_RECALL
    assert faiss.extract_index_ivf(index).nprobe == nprobe
    sample = vectors[:: len(vectors) // 256][:256]
    exact = np.argsort(-(sample @ vectors.T), axis=1)[:, :50]
    _, found = index.search(sample, 50)
    assert np.mean([len(set(a) & set(b)) / 50 for a, b in zip(exact, found)]) >= CALIBRATION_RECALL - 0.005
    faiss.extract_index_ivf(index).nprobe = probe_counts(64)[probe_counts(64).index(nprobe) - 1]
    _, fewer = index.search(sample, 50)  # one step fewer lists falls short of the target
    assert np.mean([len(set(a) & set(b)) / 50 for a, b in zip(exact, fewer)]) < CALIBRATION_RECALL


def test_a_saved_ivf_index_records_its_calibrated_nprobe_and_reloads_with_it(tmp_path):
    faiss = pytest.importorskip("faiss")
    from ssft.eval.index import build_saved_index, load_index

    vectors = _clustered(2000, 32)
    folder = tmp_path / "idx"
    manifest = {"format": corpus.SHARDS_FORMAT, "model": "m", "precision": "fp32", "corpus": "c", "units": 2000,
                "shard_size": 1000, "settings": {}, "unit_ids": [f"d{i}" for i in range(2000)]}
    for shard in range(2):
        corpus.write_shard(folder, shard, vectors[shard * 1000 : (shard + 1) * 1000], manifest)
    (folder / "encode.json").write_text(json.dumps(manifest))
    info = build_saved_index(folder, "ivf")
    assert isinstance(info["nprobe"], int) and 1 <= info["nprobe"] <= int(info["factory"][3:].split(",")[0])
    assert faiss.extract_index_ivf(load_index(folder).index).nprobe == info["nprobe"]
    assert build_saved_index(folder, "ivf", nprobe=3)["nprobe"] == 3
    assert build_saved_index(folder, "flat")["nprobe"] is None


def test_encode_then_retrieve_from_the_saved_index(tiny_model_dir, tiny_dataset, tmp_path):
    from ssft.cli.encode import main as encode_main
    from ssft.cli.retrieve import main as retrieve_main

    _dense(tiny_model_dir).save(tmp_path / "run" / "model")
    assert encode_main([str(tmp_path / "run"), "--data", str(tiny_dataset), "--output", str(tmp_path / "index"),
                        "--shard-size", "4"]) == 0
    assert sorted(os.listdir(tmp_path / "index" / "shards")) == ["00000.json", "00000.npy", "00001.json", "00001.npy"]
    assert retrieve_main([str(tmp_path / "run"), "--data", str(tiny_dataset), "--split", "test", "--output",
                          str(tmp_path / "direct"), "--depth", "3"]) == 0
    assert retrieve_main([str(tmp_path / "run"), "--data", str(tiny_dataset), "--split", "test", "--output",
                          str(tmp_path / "from-index"), "--depth", "3", "--index-dir", str(tmp_path / "index")]) == 0
    direct = [line.split()[:3] for line in (tmp_path / "direct" / "run.trec").read_text().splitlines()]
    saved = [line.split()[:3] for line in (tmp_path / "from-index" / "run.trec").read_text().splitlines()]
    assert saved == direct
    # the queries served at another precision than the index's documents were encoded at (the docs allow it)
    other = "fp32" if precision.resolve(precision.DEFAULT) == "bf16" else "bf16"
    assert retrieve_main([str(tmp_path / "run"), "--data", str(tiny_dataset), "--split", "test", "--output",
                          str(tmp_path / other), "--index-dir", str(tmp_path / "index"), "--precision", other]) == 0


# ---- fingerprints, not trust: a shard, an index and the corpus they were made from


def _encoded_folder(tiny_model_dir, tmp_path, docs: int = 30, shard_size: int = 8):
    data = write_synthetic_beir(tmp_path / "data", queries=6, docs=docs)
    ids, texts = corpus_units(load_dataset(str(data)))
    model = _dense(tiny_model_dir)
    encode_shards(model, ids, texts, tmp_path / "enc", shard_size=shard_size)
    return model, ids, texts, tmp_path / "enc"


def _swap(folder: Path, source: int, target: int) -> None:
    """Shard ``target`` replaced by shard ``source`` (same number of rows: a file of the same size)."""
    shards = folder / "shards"
    (shards / f"{target:05d}.npy").write_bytes((shards / f"{source:05d}.npy").read_bytes())
    assert (shards / f"{target:05d}.npy").stat().st_size == (shards / f"{source:05d}.npy").stat().st_size


def test_a_swapped_shard_is_encoded_again_on_resume(tiny_model_dir, tmp_path, monkeypatch, caplog):
    model, ids, texts, folder = _encoded_folder(tiny_model_dir, tmp_path)
    _swap(folder, 0, 1)
    # a shard copied whole with whatever ssft-encode keeps beside it is still the wrong shard
    for path in (folder / "shards").iterdir():
        if path.name.startswith("00000.") and path.suffix != ".npy":
            (folder / "shards" / path.name.replace("00000", "00002")).write_bytes(path.read_bytes())
    _swap(folder, 0, 2)
    real, calls = corpus.encode_corpus, []
    monkeypatch.setattr(corpus, "encode_corpus", lambda m, t, batch_size=64: calls.append(len(t)) or real(m, t, batch_size))
    with caplog.at_level("WARNING"):
        encode_shards(model, ids, texts, folder, shard_size=8)
    assert calls == [8, 8]  # shards 1 and 2 again, not 0 and 3
    assert "00001.npy" in caplog.text
    np.testing.assert_allclose(_vectors(folder).astype(np.float32), real(model, texts), atol=2e-3)


def test_building_an_index_refuses_a_swapped_shard(tiny_model_dir, tmp_path):
    pytest.importorskip("faiss")
    from ssft.core.errors import SsftError
    from ssft.eval.index import build_saved_index

    _, _, _, folder = _encoded_folder(tiny_model_dir, tmp_path)
    _swap(folder, 2, 0)
    with pytest.raises(SsftError, match=r"00000\.npy: .*checksum"):
        build_saved_index(folder, "flat")
    assert not (folder / "index.faiss").exists()
    with pytest.raises(SsftError, match=r"00000\.npy: .*checksum"):
        list(read_shards(folder, read_manifest(folder)))


def test_a_shard_swapped_after_the_index_is_built(tiny_model_dir, tiny_dataset, tmp_path):
    """ssft-retrieve serves index.faiss, not the shards: a shard swapped afterwards changes nothing it returns, and
    the next ssft-encode (resume) encodes that shard again before it builds anything from it."""
    from ssft.cli.encode import main as encode_main
    from ssft.cli.retrieve import main as retrieve_main

    _dense(tiny_model_dir).save(tmp_path / "run" / "model")
    encode = [str(tmp_path / "run"), "--data", str(tiny_dataset), "--output", str(tmp_path / "index"), "--shard-size", "2"]
    assert encode_main(encode) == 0

    def retrieved(name: str) -> list[list[str]]:
        assert retrieve_main([str(tmp_path / "run"), "--data", str(tiny_dataset), "--split", "test", "--output",
                              str(tmp_path / name), "--depth", "3", "--index-dir", str(tmp_path / "index")]) == 0
        return [line.split()[:3] for line in (tmp_path / name / "run.trec").read_text().splitlines()]

    before = retrieved("before")
    shard1 = (tmp_path / "index" / "shards" / "00001.npy").read_bytes()
    _swap(tmp_path / "index", 0, 1)
    assert retrieved("after") == before
    assert encode_main(encode) == 0  # resumed: shard 1 encoded again, the index rebuilt from the right shards
    assert (tmp_path / "index" / "shards" / "00001.npy").read_bytes() == shard1
    assert retrieved("rebuilt") == before


def test_an_index_file_replaced_by_another_of_the_same_size_is_refused(tiny_model_dir, tmp_path):
    pytest.importorskip("faiss")
    from ssft.core.errors import SsftError
    from ssft.eval.index import INDEX_FILE, build_saved_index, load_index

    model, ids, texts, folder = _encoded_folder(tiny_model_dir, tmp_path)
    build_saved_index(folder, "flat")
    load_index(folder)
    # another model's index of the same corpus: the same size, the same number of vectors
    other = _dense(tiny_model_dir)
    with torch.no_grad():
        next(other.parameters()).add_(0.1)
    encode_shards(other, ids, texts, tmp_path / "other", shard_size=8)
    build_saved_index(tmp_path / "other", "flat")
    swapped = (tmp_path / "other" / INDEX_FILE).read_bytes()
    assert len(swapped) == (folder / INDEX_FILE).stat().st_size
    (folder / INDEX_FILE).write_bytes(swapped)
    with pytest.raises(SsftError, match=r"index\.faiss: .*checksum"):
        load_index(folder)


def _write_corpus(data: Path, docs: dict[str, str]) -> None:
    with open(data / "corpus.jsonl", "w") as fh:
        for doc_id, text in docs.items():
            fh.write(json.dumps({"_id": doc_id, "title": "", "text": text}) + "\n")


def _corpus(data: Path) -> dict[str, str]:
    return {k: d.text for k, d in load_dataset(str(data)).corpus.items()}


@pytest.mark.parametrize("passage_words", [None, 5])
def test_an_index_of_another_version_of_the_corpus_is_refused(passage_words, tiny_model_dir, tmp_path):
    pytest.importorskip("faiss")
    from ssft.core.errors import SsftError
    from ssft.eval.index import build_saved_index, load_index

    data = write_synthetic_beir(tmp_path / "data", queries=6, docs=30)
    docs = _corpus(data)
    ids, texts = corpus_units(load_dataset(str(data)), passage_words)
    encode_shards(_dense(tiny_model_dir), ids, texts, tmp_path / "enc", shard_size=8,
                  settings={"passage_words": passage_words, "passage_stride": None})
    build_saved_index(tmp_path / "enc", "flat")
    assert load_index(tmp_path / "enc", dataset=load_dataset(str(data))).unit_ids == ids
    # the same documents in another order: the index still holds them all, row by row
    _write_corpus(data, dict(reversed(list(docs.items()))))
    load_index(tmp_path / "enc", dataset=load_dataset(str(data)))
    # one text changed
    _write_corpus(data, {**docs, "d7": docs["d7"] + " and more"})
    changed = r"--index-dir .*enc: the corpus changed since .*\(--data .*: the same 30 documents, but their texts differ\)"
    with pytest.raises(SsftError, match=changed + "; rebuild the index with ssft-encode"):
        load_index(tmp_path / "enc", dataset=load_dataset(str(data)))
    # a third of the documents removed
    _write_corpus(data, {k: v for i, (k, v) in enumerate(docs.items()) if i % 3})
    with pytest.raises(SsftError, match=r"the corpus changed since .*: 10 of the 30 indexed documents are missing\)"):
        load_index(tmp_path / "enc", dataset=load_dataset(str(data)))
    # a document added
    _write_corpus(data, {**docs, "new": "a document written after the index"})
    with pytest.raises(SsftError, match=r"the corpus changed since .*: 1 document is not indexed\)"):
        load_index(tmp_path / "enc", dataset=load_dataset(str(data)))


@pytest.mark.parametrize("spec", ["IVF64,Flat", "PQ8x8np", "IVF4,PQ8x8np", "OPQ8,IVF4,PQ8", "HNSW32,PQ8",
                                  "IVF4,PQ8x4fs", "RQ2x6", "IVF2,RQ1x4", "PRQ2x2x4", "PCA16,IVF2,Flat"])
def test_training_needs_match_what_faiss_needs(spec):
    """The count of training vectors ``check_index`` asks for is the one faiss needs: one less fails in faiss."""
    faiss = pytest.importorskip("faiss")
    from ssft.core.errors import SsftError
    from ssft.eval.index import check_index

    need = check_index(spec, 10**6, 32)[1]
    assert need > 1
    with pytest.raises(SsftError, match=rf"--index {spec}: .*{need}.*the corpus has {need - 1}"):
        check_index(spec, need - 1, 32)
    x = np.random.default_rng(0).standard_normal((need, 32)).astype(np.float32)
    faiss.index_factory(32, spec, faiss.METRIC_INNER_PRODUCT).train(x)
    with pytest.raises(RuntimeError):
        faiss.index_factory(32, spec, faiss.METRIC_INNER_PRODUCT).train(x[:-1])


def test_an_index_with_more_lists_than_vectors_is_refused_before_building(tiny_model_dir, tmp_path):
    pytest.importorskip("faiss")
    from ssft.core.errors import SsftError
    from ssft.eval.index import build_saved_index

    _, _, _, folder = _encoded_folder(tiny_model_dir, tmp_path)
    for spec, numbers in (("IVF4096,Flat", "4096 .*30"), ("PQ8x8", "256 .*30")):
        with pytest.raises(SsftError, match=rf"--index {spec}: .*{numbers}"):
            build_saved_index(folder, spec)
    assert not (folder / "index.faiss").exists()


@pytest.mark.parametrize("architecture", ["dense", "colbert"])
def test_accelerate_launch_two_processes_build_the_index_one_process_builds(architecture, tiny_model_dir, tmp_path):
    """``accelerate launch --multi_gpu --num_processes 2 ssft-encode`` on a machine without GPU (two gloo CPU processes
    through torchrun): each process encodes its own shards into the one folder, the main process merges every shard
    into the index, and shards, index and retrieval are those of one process."""
    import socket
    import subprocess
    import sys

    from ssft.cli.encode import main as encode_main
    from ssft.config.registry import MODELS
    from ssft.eval.index import INDEX_INFO, load_index

    data = write_synthetic_beir(tmp_path / "data", queries=6, docs=40)
    torch.manual_seed(0)
    cfg = ModelConfig(architecture=architecture, name=str(tiny_model_dir), max_length=32, query_max_length=12,
                      **({"colbert_dim": 16} if architecture == "colbert" else {}))
    MODELS.get(architecture).build(cfg, "full", {}).save(tmp_path / "run" / "model")
    args = [str(tmp_path / "run"), "--data", str(data), "--shard-size", "7", "--precision", "fp32"]
    assert encode_main([*args, "--output", str(tmp_path / "one")]) == 0
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONPATH": str(root), "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "SSFT_PROGRESS": "0"}
    with socket.socket() as sock:  # a free port: another run on the machine may hold torchrun's default 29500
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", "2", "--num_machines", "1", "--multi_gpu",
           "--main_process_port", str(port), "--mixed_precision", "no", "--dynamo_backend", "no",
           str(root / "ssft" / "cli" / "encode.py"), *args, "--output", str(tmp_path / "two")]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("vectors (") == 1  # the index is built and reported by the main process only
    # the six shards were written by two processes, three each (every second shard: 0, 2, 4 and 1, 3, 5)
    one, two = read_manifest(tmp_path / "one"), read_manifest(tmp_path / "two")
    assert one == two and sorted(p.name for p in (tmp_path / "two" / "shards").glob("*.npy")) == \
        [f"{s:05d}.npy" for s in range(6)]
    np.testing.assert_allclose(_vectors(tmp_path / "two").astype(np.float32),
                               _vectors(tmp_path / "one").astype(np.float32), atol=2e-3)
    info_one, info_two = (json.loads((tmp_path / f / INDEX_INFO).read_text()) for f in ("one", "two"))
    assert info_two["vectors"] == info_one["vectors"] and info_two["factory"] == info_one["factory"] == "Flat"
    queries = np.random.default_rng(0).standard_normal((5, info_one["dim"])).astype(np.float32)
    found_one, found_two = load_index(tmp_path / "one").search(queries, 10), load_index(tmp_path / "two").search(queries, 10)
    np.testing.assert_array_equal(found_two[1], found_one[1])


def test_a_dense_model_is_refused_an_index_of_kind_plaid_before_anything_is_encoded(tiny_model_dir, tiny_dataset,
                                                                                   tmp_path):
    """plaid indexes a ColBERT model's token vectors: a dense model asking for it is told so before its corpus is
    encoded, not after (no shard, no folder contents left behind)."""
    from ssft.core.errors import SsftError
    from ssft.pipeline.encode import encode_corpus
    from tests.helpers import tiny_frozen_ranker

    out = tmp_path / "enc"
    with pytest.raises(SsftError, match=r"^--index plaid: indexes a ColBERT model's token vectors; .* dense model"):
        encode_corpus(tiny_frozen_ranker(tiny_model_dir, "dense"), tiny_dataset, out, index="plaid", precision="fp32")
    assert not out.exists() or not any(out.rglob("*.npy"))

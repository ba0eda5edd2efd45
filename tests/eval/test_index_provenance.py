"""An index, a shard record and an embedding-cache entry are tied to everything that made them: the model (weights,
precision, backend, int8 calibration), the corpus and, for token vectors, the tokens per document. Files copied
from another encoding are refused; what the docs allow -- queries served at another precision or backend than the
index's documents were encoded at -- is served."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from ssft.core import precision
from ssft.core.errors import SsftError
from ssft.data.beir import load_dataset
from ssft.models.corpus import corpus_units, encode_shards, read_manifest, read_shards
from ssft.models.embedding_cache import model_fingerprint, weights_fingerprint
from tests.helpers import tiny_frozen_ranker, write_synthetic_beir

faiss = pytest.importorskip("faiss")


def _model(model_dir, architecture: str = "dense", nudge: float = 0.0):
    return tiny_frozen_ranker(model_dir, architecture, nudge)


def _encoded(model, data, folder, shard_size: int = 8):
    from ssft.eval.index import build_saved_index

    ids, texts = corpus_units(load_dataset(str(data)))
    encode_shards(model, ids, texts, folder, shard_size=shard_size)
    build_saved_index(folder, "flat")
    return folder


@pytest.mark.parametrize("architecture", ["dense", "colbert"])
def test_an_index_copied_from_another_models_encoding_is_refused(architecture, tiny_model_dir, tmp_path):
    """index.faiss + index.json of another model's encoding of the same corpus (checksums intact) beside this
    folder's shards: the index's model fingerprint is not encode.json's."""
    from ssft.eval.colbert_index import load_late_index
    from ssft.eval.index import INDEX_FILE, INDEX_INFO, load_index

    data = write_synthetic_beir(tmp_path / "data", queries=6, docs=20)
    mine = _encoded(_model(tiny_model_dir, architecture), data, tmp_path / "mine")
    other = _encoded(_model(tiny_model_dir, architecture, nudge=0.5), data, tmp_path / "other")
    load = load_late_index if architecture == "colbert" else load_index
    load(mine)
    for name in (INDEX_FILE, INDEX_INFO):
        shutil.copyfile(other / name, mine / name)
    with pytest.raises(SsftError, match=r"built from another encoding than encode\.json's \(model"):
        load(mine, dataset=load_dataset(str(data)))


def test_a_shard_records_token_counts_are_inside_its_checksum(tiny_model_dir, tmp_path):
    """Two documents' token counts swapped in a ColBERT shard's record (same total, same shard bytes): the shard is
    refused, not cut into other documents; the next ssft-encode encodes it again."""
    data = write_synthetic_beir(tmp_path / "data", queries=6, docs=20)
    model = _model(tiny_model_dir, "colbert")
    ids, texts = corpus_units(load_dataset(str(data)))
    encode_shards(model, ids, texts, tmp_path / "enc", shard_size=8)
    record_path = tmp_path / "enc" / "shards" / "00001.json"
    record = json.loads(record_path.read_text())
    lengths = record["lengths"]
    i, j = next((i, j) for i in range(len(lengths)) for j in range(i + 1, len(lengths)) if lengths[i] != lengths[j])
    lengths[i], lengths[j] = lengths[j], lengths[i]
    record_path.write_text(json.dumps(record))
    with pytest.raises(SsftError, match=r"00001\.npy: its token counts or bytes do not match the checksum"):
        list(read_shards(tmp_path / "enc", read_manifest(tmp_path / "enc")))
    encode_shards(model, ids, texts, tmp_path / "enc", shard_size=8)  # resumed: that shard encoded again
    assert len(list(read_shards(tmp_path / "enc", read_manifest(tmp_path / "enc")))) == 3


def test_a_colbert_index_records_the_tokens_per_document(tiny_model_dir, tmp_path):
    from ssft.eval.index import encoding_difference

    data = write_synthetic_beir(tmp_path / "data", queries=6, docs=12)
    folder = _encoded(_model(tiny_model_dir, "colbert"), data, tmp_path / "enc")
    info = json.loads((folder / "index.json").read_text())
    assert info["tokens"] and info["model"] == read_manifest(folder)["model"]
    assert encoding_difference(folder, read_manifest(folder), {**info, "tokens": "0" * 64}) == \
        "tokens per document differs"


def test_the_embedding_cache_key_holds_the_int8_calibration(tiny_model_dir):
    """Two int8 servings of one model calibrated on different texts quantise to different vectors: their model
    fingerprints (the embedding cache's key, an encoding's 'model') differ; their weights are the same model."""
    pytest.importorskip("openvino")
    pytest.importorskip("nncf")
    from ssft.models.interop import openvino

    words = "bone iron heart coffee tea calcium blood pressure diet meat beans spinach".split()
    rng = np.random.default_rng(0)
    first = [" ".join(rng.choice(words, size=8)) for _ in range(12)]
    second = [" ".join(rng.choice(words, size=20)) for _ in range(12)]
    a = openvino.serve_openvino(_model(tiny_model_dir), "int8", calibration=first)
    b = openvino.serve_openvino(_model(tiny_model_dir), "int8", calibration=second)
    again = openvino.serve_openvino(_model(tiny_model_dir), "int8", calibration=first)
    assert model_fingerprint(a) != model_fingerprint(b)
    assert model_fingerprint(a) == model_fingerprint(again)
    assert weights_fingerprint(a) == weights_fingerprint(b) == weights_fingerprint(_model(tiny_model_dir))
    openvino.unserve(a)
    assert precision.calibration_of(a) is None and model_fingerprint(a) == model_fingerprint(_model(tiny_model_dir))


def test_an_encode_resumed_at_another_precision_names_the_precision(tiny_model_dir, tmp_path):
    data = write_synthetic_beir(tmp_path / "data", queries=6, docs=10)
    ids, texts = corpus_units(load_dataset(str(data)))
    encode_shards(_model(tiny_model_dir), ids, texts, tmp_path / "enc", shard_size=4)
    bf16 = precision.set_precision(_model(tiny_model_dir), "bf16")
    if precision.model_precision(bf16) != "bf16":
        bf16 = _model(tiny_model_dir)
        object.__setattr__(bf16, precision.ATTRIBUTE, "bf16")
    with pytest.raises(SsftError, match=r"another encoding \(precision differs: fp32 there, bf16 now\)"):
        encode_shards(bf16, ids, texts, tmp_path / "enc", shard_size=4)
    with pytest.raises(SsftError, match=r"another encoding \(model differs\)"):
        encode_shards(_model(tiny_model_dir, nudge=0.5), ids, texts, tmp_path / "enc", shard_size=4)


def test_queries_served_otherwise_than_the_index_are_served(tiny_model_dir, tiny_dataset, tmp_path, capsys):
    """--precision and --backend with --index-dir override how the queries are served (the docs allow it); the
    documents stay as encoded. Another model's weights are still refused."""
    from ssft.cli.encode import main as encode_main
    from ssft.cli.retrieve import main as retrieve_main

    _model(tiny_model_dir).save(tmp_path / "run" / "model")
    _model(tiny_model_dir, nudge=0.5).save(tmp_path / "other" / "model")
    assert encode_main([str(tmp_path / "run"), "--data", str(tiny_dataset), "--output", str(tmp_path / "index"),
                        "--precision", "bf16", "--backend", "torch"]) == 0

    def retrieved(name: str, *flags: str, model: str = "run") -> int:
        return retrieve_main([str(tmp_path / model), "--data", str(tiny_dataset), "--split", "test", "--output",
                              str(tmp_path / name), "--depth", "3", "--index-dir", str(tmp_path / "index"), *flags])

    assert retrieved("as-indexed") == 0
    assert retrieved("fp32", "--precision", "fp32") == 0
    runs = {name: [line.split()[:3] for line in (tmp_path / name / "run.trec").read_text().splitlines()]
            for name in ("as-indexed", "fp32")}
    assert runs["fp32"] == runs["as-indexed"]
    capsys.readouterr()
    assert retrieved("another", model="other") == 2
    assert "was encoded by another model" in capsys.readouterr().err
    if pytest.importorskip("openvino"):
        assert retrieved("openvino", "--backend", "openvino") == 0
        assert retrieved("int8", "--precision", "int8") == 0


def test_an_embedding_cache_entry_records_its_tokens_per_document(tmp_path, monkeypatch):
    """A multi-vector cache entry whose token counts were changed (same total) is a miss, never other documents'
    tokens."""
    from safetensors.torch import load_file, safe_open, save_file

    from ssft.models import embedding_cache
    from ssft.models.encoded import Encoded

    monkeypatch.setenv("SSFT_CACHE", str(tmp_path))
    reps = [Encoded(torch.randn(1, n, 4), torch.ones(1, n, dtype=torch.bool)) for n in (2, 5)]
    path = embedding_cache.cache_path("m" * 64, "c" * 64)
    embedding_cache._write(path, ["a", "b"], reps, "m" * 64, "c" * 64)
    read = embedding_cache._read(path, ["a", "b"], "m" * 64, "c" * 64)
    assert [r.vectors.shape[1] for r in read] == [2, 5]
    with safe_open(str(path), framework="pt") as fh:
        meta = fh.metadata()
    tensors = load_file(str(path))
    tensors["lengths"] = torch.tensor([5, 2])
    save_file(tensors, str(path), metadata=meta)
    assert embedding_cache._read(path, ["a", "b"], "m" * 64, "c" * 64) is None

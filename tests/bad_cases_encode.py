"""The bad-input matrix: ssft-encode and ssft-retrieve --index-dir (issue 19). Case format: see
tests/bad_cases_base.py. The output folder (--output) must be left as it was."""
from __future__ import annotations

import json

from tests.bad_input_world import World

SHARDS_FORMAT = "ssft-encoded-corpus/1"  # ssft.models.corpus.SHARDS_FORMAT, spelled out: a test of the file format


def _dense_ranker(w: World):
    import torch

    from ssft.models.dense import DenseDualEncoder
    from ssft.recipe import ModelConfig

    path = w.root / "dense"
    if not path.exists():
        torch.manual_seed(0)
        DenseDualEncoder.build(ModelConfig(architecture="dense", name=str(w.model), max_length=48), "full", {}).save(path)
    return path


def _encode(*extra: str, model: str = "dense"):
    def build(w: World) -> list[str]:
        ranker = _dense_ranker(w) if model == "dense" else w.ranker
        return [str(ranker), "--data", str(w.data), "--output", str(w.out), *extra]
    return build


def _encode_into(files: dict[str, str], *extra: str):
    """ssft-encode into an --output folder that already holds ``files``."""
    def build(w: World) -> list[str]:
        argv = _encode(*extra)(w)
        for name, text in files.items():
            (w.out / name).parent.mkdir(parents=True, exist_ok=True)
            (w.out / name).write_text(text)
        return argv
    return build


def _output_is_a_file(w: World) -> list[str]:
    argv = _encode()(w)
    w.out.write_text("not a folder\n")
    return argv


def _retrieve_from(files: dict[str, str]):
    def build(w: World) -> list[str]:
        index_dir = w.root / "index"
        index_dir.mkdir()
        for name, text in files.items():
            (index_dir / name).write_text(text)
        return [str(_dense_ranker(w)), "--data", str(w.data), "--split", "test", "--output", str(w.out),
                "--index-dir", str(index_dir)]
    return build


OTHER_ENCODING = json.dumps({"format": SHARDS_FORMAT, "model": "another-model", "precision": "fp32", "corpus": "x",
                             "units": 3, "shard_size": 10, "settings": {}, "unit_ids": ["a", "b", "c"]})

# (id, CLI module, argv builder, culprit the message must name[, flags])
CASES: list[tuple] = [
    ("encode-model-not-dense", "ssft.cli.encode", _encode(model="cross"),
     "a corpus index needs a single-vector dense model (architecture 'dense'), not 'cross'"),
    ("encode-model-missing", "ssft.cli.encode", lambda w: [str(w.root / "gone"), "--data", str(w.data), "--output",
                                                           str(w.out)], "gone"),
    ("encode-data-missing", "ssft.cli.encode", lambda w: [str(_dense_ranker(w)), "--data", str(w.root / "nodata"),
                                                          "--output", str(w.out)], "not found"),
    ("encode-output-is-a-file", "ssft.cli.encode", _output_is_a_file, "is a file, not a folder"),
    ("encode-output-foreign-folder", "ssft.cli.encode", _encode_into({"thesis.tex": "mine\n"}),
     "is not empty and holds no ssft-encode output"),
    ("encode-output-other-encoding", "ssft.cli.encode", _encode_into({"encode.json": OTHER_ENCODING}),
     "holds shards of another encoding (model differs)"),
    ("encode-output-unreadable-manifest", "ssft.cli.encode", _encode_into({"encode.json": "{not json"}),
     "encode.json: not a readable manifest of encoded shards"),
    ("encode-output-foreign-manifest", "ssft.cli.encode", _encode_into({"encode.json": '{"format": "other/9"}'}),
     "encode.json: not a manifest of ssft-encode shards"),
    ("encode-unknown-index", "ssft.cli.encode", _encode("--index", "annoy"), "--index: expected one of"),
    ("encode-passage-words-zero", "ssft.cli.encode", _encode("--passage-words", "0"), "--passage-words must be >= 1"),
    ("encode-shard-size-zero", "ssft.cli.encode", _encode("--shard-size", "0"), "--shard-size"),
    ("encode-unknown-precision", "ssft.cli.encode", _encode("--precision", "fp8"), "--precision"),
    ("retrieve-index-dir-empty", "ssft.retrieve", _retrieve_from({}), "no saved index"),
    ("retrieve-index-info-not-json", "ssft.retrieve",
     _retrieve_from({"encode.json": OTHER_ENCODING, "index.json": "{", "index.faiss": "x"}), "index.json: not readable JSON"),
    ("retrieve-index-unreadable", "ssft.retrieve",
     _retrieve_from({"encode.json": OTHER_ENCODING, "index.json": '{"factory": "Flat"}', "index.faiss": "not faiss"}),
     "index.faiss: faiss cannot read it"),
]

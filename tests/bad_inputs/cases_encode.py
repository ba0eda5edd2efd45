"""The bad-input matrix: ssft-encode and ssft-retrieve --index-dir. Case format: see
tests/bad_inputs/cases_base.py. The output folder (--output) must be left as it was."""
from __future__ import annotations

import hashlib
import json

from tests.bad_inputs.world import World

SHARDS_FORMAT = "ssft-encoded-corpus/1"  # ssft.models.corpus.SHARDS_FORMAT, spelled out: a test of the file format


def _dense_ranker(w: World):
    import torch

    from ssft.config.recipe import ModelConfig
    from ssft.models.dense import DenseDualEncoder

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


def _encode_one_document(*extra: str):
    def build(w: World) -> list[str]:
        path = w.data / "corpus.jsonl"
        path.write_text(path.read_text().splitlines()[0] + "\n")
        return _encode(*extra)(w)
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


def _encoded_then(change, *extra: str):
    """ssft-retrieve --index-dir INDEX with an index ssft-encode built of --data, then ``change(w)`` to --data (the
    corpus edited after the index was built)."""
    def build(w: World) -> list[str]:
        from tests.cli_runner import run_cli

        ranker, index_dir = _dense_ranker(w), w.root / "index"
        done = run_cli("ssft.cli.encode", [str(ranker), "--data", str(w.data), "--output", str(index_dir), *extra],
                       cwd=w.root, env={"HF_HUB_OFFLINE": "1", "SSFT_CACHE": str(w.root / "cache")})
        assert done.returncode == 0, done.stderr[-3000:]
        change(w)
        return [str(ranker), "--data", str(w.data), "--split", "test", "--output", str(w.out), "--index-dir",
                str(index_dir)]
    return build


def _edit_corpus(edit):
    def change(w: World) -> None:
        path = w.data / "corpus.jsonl"
        docs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        path.write_text("".join(json.dumps(d) + "\n" for d in edit(docs)))
    return change


def _text_changed(docs: list[dict]) -> list[dict]:
    docs[2]["text"] += " (corrected)"
    return docs


def _replace_index_file(w: World) -> None:
    path = w.root / "index" / "index.faiss"
    data = bytearray(path.read_bytes())
    data[-5] ^= 0xFF  # one byte of a vector: the same size, faiss still reads it
    path.write_bytes(bytes(data))


def _manifest_without(key: str):
    def change(w: World) -> None:
        path = w.root / "index" / "encode.json"
        manifest = json.loads(path.read_text())
        del manifest[key]
        path.write_text(json.dumps(manifest))
    return change


NOT_FAISS_SHA = hashlib.sha256(b"not faiss").hexdigest()
OTHER_ENCODING = json.dumps({"format": SHARDS_FORMAT, "weights": "another-model", "model": "another-model",
                             "precision": "fp32", "corpus": "x",
                             "units": 3, "shard_size": 10, "settings": {}, "unit_ids": ["a", "b", "c"]})

# (id, CLI module, argv builder, culprit the message must name[, flags])
CASES: list[tuple] = [
    ("encode-model-not-dense", "ssft.cli.encode", _encode(model="cross"),
     "a corpus index needs a dense or a ColBERT model (architecture 'dense' or 'colbert'), not 'cross'"),
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
    ("retrieve-index-dir-empty", "ssft.cli.retrieve", _retrieve_from({}), "no saved index"),
    ("retrieve-index-info-not-json", "ssft.cli.retrieve",
     _retrieve_from({"encode.json": OTHER_ENCODING, "index.json": "{", "index.faiss": "x"}), "index.json: not readable JSON"),
    ("retrieve-index-unreadable", "ssft.cli.retrieve",
     _retrieve_from({"encode.json": OTHER_ENCODING, "index.json": json.dumps({"factory": "Flat", "sha256": NOT_FAISS_SHA}),
                     "index.faiss": "not faiss"}), "index.faiss: faiss cannot read it"),
    ("retrieve-index-no-checksum", "ssft.cli.retrieve",
     _retrieve_from({"encode.json": OTHER_ENCODING, "index.json": '{"factory": "Flat"}', "index.faiss": "not faiss"}),
     "index.json: records no checksum of index.faiss"),
    # an index.faiss replaced (by another index, or damaged) after ssft-encode built it
    ("retrieve-index-file-replaced", "ssft.cli.retrieve", _encoded_then(_replace_index_file),
     "index.faiss: does not match the checksum in index.json"),
    ("retrieve-index-manifest-no-unit-ids", "ssft.cli.retrieve", _encoded_then(_manifest_without("unit_ids")),
     "encode.json: not a manifest of ssft-encode shards ('unit_ids' missing or malformed)"),
    # the corpus changed since the index was built: its rows would name documents that are gone or say other things
    ("retrieve-index-corpus-text-changed", "ssft.cli.retrieve", _encoded_then(_edit_corpus(_text_changed)),
     "the corpus changed since"),
    ("retrieve-index-corpus-docs-removed", "ssft.cli.retrieve", _encoded_then(_edit_corpus(lambda d: d[::3] + d[1::3])),
     "2 of the 6 indexed documents are missing"),
    ("retrieve-index-passages-text-changed", "ssft.cli.retrieve",
     _encoded_then(_edit_corpus(_text_changed), "--passage-words", "3"), "--index-dir"),
    # more inverted lists / centroids than vectors to train them: refused before anything is encoded
    ("encode-ivf-more-lists-than-vectors", "ssft.cli.encode", _encode("--index", "IVF4096,Flat"),
     "--index IVF4096,Flat: faiss needs at least 4096 training vectors"),
    ("encode-pq-more-centroids-than-vectors", "ssft.cli.encode", _encode("--index", "IVF2,PQ8x8"), "the corpus has 6"),
    ("encode-pq-one-document", "ssft.cli.encode", _encode_one_document("--index", "pq"), "--index pq"),
]

"""Encoding a corpus (or a list of queries) with a bi-encoder's own encode path: what full retrieval indexes and what
a frozen dense model keeps of its corpus.

- ``encode_corpus`` / ``encode_query_texts``: eval mode without autograd, texts batched longest first by exact token
  count so batches pad little (``ssft.models.batching``; vectors returned in the order of the texts).
- ``corpus_vectors``: (unit ids, vectors) of a whole corpus, documents or -- with ``passage_words`` -- ``doc#i``
  passages (``split_passages``); a frozen model reads them from the on-disk embedding cache when it has encoded this
  corpus before (``ssft.models.embedding_cache``).
- ``encode_shards``: corpus encoding as its own step, for corpora past one process's patience (``ssft-encode``): the
  units cut into fixed shards, each process of ``accelerate launch --num_processes N`` encoding every N-th shard,
  each shard written as float16 ``shards/NNNNN.npy`` atomically (complete or absent), so a killed run resumes by
  skipping the shards already written; ``read_shards`` gives them back in order.
- A multi-vector model (ColBERT, ``multi_vector``) writes each unit's scored token vectors instead, one unit after the
  other in its shard, the tokens per unit in the shard's record (``read_token_lengths``); ``encode_token_corpus`` /
  ``encode_query_tokens`` give a text's token matrix.
- Fingerprints, not trust: each shard has a record beside it (``shards/NNNNN.json``: its SHA-256, its number, its
  unit range, the model and corpus fingerprints), written after the shard; a shard without its record, or one whose
  bytes or record do not match (a shard replaced by another of the same size), is encoded again on resume and
  refused by ``read_shards``. ``corpus_difference`` says whether a dataset is still the corpus an encoded folder
  holds (the same units with the same texts, in any order).
"""
from __future__ import annotations

import hashlib
import io
import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch

from ssft.core import distributed
from ssft.core.errors import SsftError
from ssft.core.io import atomic_write_file, atomic_write_json
from ssft.core.precision import served_as
from ssft.core.progress import Progress, track
from ssft.data.beir import IRDataset
from ssft.models.batching import length_batches, token_lengths
from ssft.models.embedding_cache import cached_documents, corpus_fingerprint, model_fingerprint, weights_fingerprint
from ssft.models.encoded import Encoded

logger = logging.getLogger(__name__)


def _encode(encode_fn, texts: list[str], batches: list[list[int]], what: str = "encoding") -> np.ndarray:
    """Vectors (n, dim) float32 of ``texts`` in their order, encoded batch by batch (``batches``: lists of indices)."""
    out: np.ndarray | None = None
    with Progress(what, len(texts), "texts") as bar:
        for rows in batches:
            vectors = encode_fn([texts[i] for i in rows]).vectors.float().cpu().numpy()
            if out is None:
                out = np.empty((len(texts), vectors.shape[1]), dtype=np.float32)
            out[rows] = vectors
            bar.update(len(rows))
    return out if out is not None else np.zeros((0, 0), dtype=np.float32)


def _batches(model, texts: list[str], tower: str, batch_size: int) -> list[list[int]]:
    """``texts`` cut into batches longest first by exact token count (``ssft.models.batching``)."""
    return length_batches(token_lengths(model, texts, tower), batch_size)


@contextmanager
def _inference(model) -> Iterator[None]:
    """Eval mode without autograd, the previous mode restored after."""
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            yield
    finally:
        model.train(was_training)


def encode_corpus(model, texts: list[str], batch_size: int = 64) -> np.ndarray:
    """Document vectors in the order of ``texts``, encoded in batches by token count, eval mode, no gradient.

    Args:
        model: a single-vector bi-encoder (or any model with ``encode_documents``).
        texts: the documents.
        batch_size: texts per batch.

    Returns:
        (n, dim) float32.
    """
    batches = _batches(model, texts, "document", batch_size)
    with _inference(model):
        return _encode(model.encode_documents, texts, batches, "encoding documents")


def encode_query_texts(model, texts: list[str], batch_size: int = 64) -> np.ndarray:
    """Query vectors in the order of ``texts``, encoded in batches by token count, eval mode, no gradient.

    Args:
        model: a single-vector bi-encoder.
        texts: the queries.
        batch_size: texts per batch.

    Returns:
        (n, dim) float32.
    """
    batches = _batches(model, texts, "query", batch_size)
    with _inference(model):
        return _encode(model.encode_queries, texts, batches, "encoding queries")


def multi_vector(model) -> bool:
    """True for a late-interaction model (ColBERT): a text is a matrix of token vectors, scored by MaxSim."""
    return bool(getattr(model, "multi_vector", False))


def _token_matrices(encode_fn, texts: list[str], batches: list[list[int]]) -> list[np.ndarray]:
    """Each text's scored token vectors (tokens, dim) float32, in the order of ``texts``: the rows its mask keeps (a
    ColBERT document drops padding and punctuation, a query keeps every position, its [MASK] expansion included)."""
    out: list[np.ndarray] = [np.zeros(0)] * len(texts)
    for rows in batches:
        encoded = encode_fn([texts[i] for i in rows])
        vectors, mask = encoded.vectors.float().cpu(), encoded.mask.bool().cpu()
        for j, i in enumerate(rows):
            out[i] = vectors[j][mask[j]].numpy()
    return out


def encode_token_corpus(model, texts: list[str], batch_size: int = 64) -> list[np.ndarray]:
    """A multi-vector model's document token matrices, encoded in batches by token count.

    Args:
        model: a multi-vector bi-encoder (ColBERT).
        texts: the documents.
        batch_size: texts per batch.

    Returns:
        One (tokens, dim) float32 array per text, in the order of ``texts``.
    """
    batches = _batches(model, texts, "document", batch_size)
    with _inference(model):
        return _token_matrices(model.encode_documents, texts, batches)


def encode_query_tokens(model, texts: list[str], batch_size: int = 64) -> list[np.ndarray]:
    """A multi-vector model's query token matrices, encoded in batches.

    Args:
        model: a multi-vector bi-encoder (ColBERT).
        texts: the queries.
        batch_size: texts per batch.

    Returns:
        One (tokens, dim) float32 array per text, in the order of ``texts``.
    """
    batches = _batches(model, texts, "query", batch_size)
    with _inference(model):
        return _token_matrices(model.encode_queries, texts, batches)


def split_passages(text: str, words: int, stride: int | None = None) -> list[str]:
    """Windows of ``words`` words every ``stride`` words (default: no overlap); a short text is one passage."""
    tokens = text.split()
    stride = stride or words
    if len(tokens) <= words:
        return [text]
    return [" ".join(tokens[i : i + words]) for i in range(0, max(len(tokens) - words, 0) + stride, stride)
            if tokens[i : i + words]]


def corpus_units(dataset: IRDataset, passage_words: int | None = None,
                 passage_stride: int | None = None) -> tuple[list[str], list[str]]:
    """(unit ids, texts) of the whole corpus: documents, or ``doc#i`` passages under maxP."""
    unit_ids, texts = [], []
    for did, doc in dataset.corpus.items():
        if passage_words:
            for i, passage in enumerate(split_passages(doc.full_text, passage_words, passage_stride)):
                unit_ids.append(f"{did}#{i}")
                texts.append(passage)
        else:
            unit_ids.append(did)
            texts.append(doc.full_text)
    return unit_ids, texts


def corpus_vectors(model, dataset: IRDataset, batch_size: int = 64, passage_words: int | None = None,
                   passage_stride: int | None = None) -> tuple[list[str], np.ndarray]:
    """(unit ids, vectors) of the whole corpus: documents, or ``doc#i`` passages under maxP. The vectors of this
    process's last encoding serve again when the weights and the corpus are the same (callers read them, never
    change them in place)."""
    unit_ids, texts = corpus_units(dataset, passage_words, passage_stride)
    # the same weights encoding the same corpus again (a run's start row, then its validation at epoch 0; the test
    # after the best epoch was the last one validated): the vectors of the last encoding serve
    source = model.document_source() if hasattr(model, "document_source") else model
    key = (model_fingerprint(source), corpus_fingerprint(unit_ids, texts))
    if _LAST_ENCODING.get("key") == key:
        logger.info("corpus vectors of %d %s reused: these weights encoded this corpus last", len(unit_ids),
                    "passages" if passage_words else "documents")
        return list(unit_ids), _LAST_ENCODING["vectors"]

    def encode_all() -> list[Encoded]:
        logger.info("encoding %d %s with the document tower", len(texts), "passages" if passage_words else "documents")
        return [Encoded(torch.from_numpy(v[None])) for v in encode_corpus(model, texts, batch_size)]

    # a frozen model reads its corpus vectors from the on-disk cache when it has encoded this corpus before
    reps = cached_documents(model, unit_ids, texts, encode_all)
    vectors = np.ascontiguousarray(torch.cat([r.vectors for r in reps]).float().cpu().numpy())
    _LAST_ENCODING.clear()
    if vectors.nbytes <= LAST_ENCODING_MAX_BYTES:  # beyond, the copy held between evaluations would cost too much
        _LAST_ENCODING.update(key=key, vectors=vectors)
    return unit_ids, vectors


# the last corpus encoding of this process (``corpus_vectors``): weights and corpus fingerprints -> its vectors
_LAST_ENCODING: dict = {}
LAST_ENCODING_MAX_BYTES = 2 << 30


SHARDS_FORMAT = "ssft-encoded-corpus/1"
MANIFEST = "encode.json"
_MANIFEST_KEYS = {"model": str, "precision": str, "corpus": str, "units": int, "shard_size": int, "unit_ids": list}


def _shard_path(folder: Path, shard: int) -> Path:
    return folder / "shards" / f"{shard:05d}.npy"


def _record_path(folder: Path, shard: int) -> Path:
    return folder / "shards" / f"{shard:05d}.json"


def file_sha256(path: Path) -> str:
    """Hex SHA-256 of a file's bytes, read in blocks (a shard or an index is never held whole for it)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 24):
            digest.update(block)
    return digest.hexdigest()


def _lengths_suffix(lengths: list[int] | None) -> bytes:
    """What a multi-vector shard's checksum covers after its bytes: its units' token counts (the rows of each unit;
    other counts would cut the same vectors into other documents)."""
    if lengths is None:
        return b""
    return b"\0lengths\0" + np.asarray(lengths, dtype="<i8").tobytes()


def _shard_sha256(path: Path, lengths: list[int] | None) -> str:
    """Hex SHA-256 of a shard's bytes, then of its token counts (``_lengths_suffix``) for a multi-vector shard."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 24):
            digest.update(block)
    digest.update(_lengths_suffix(lengths))
    return digest.hexdigest()


def _shard_record(manifest: dict, shard: int) -> dict:
    """What the record of shard ``shard`` of the encoding ``manifest`` says besides its checksum."""
    size, units = manifest["shard_size"], manifest["units"]
    return {"format": SHARDS_FORMAT, "shard": shard, "units": [shard * size, min((shard + 1) * size, units)],
            "model": manifest["model"], "corpus": manifest["corpus"]}


def write_shard(folder: Path, shard: int, vectors: np.ndarray, manifest: dict,
                lengths: list[int] | None = None) -> None:
    """Write shard ``shard`` of the encoding ``manifest`` (float16), then its record (checksum), each atomically: a
    kill between the two leaves a shard without a record, encoded again on resume. A multi-vector encoding's shard
    holds its units' token vectors one after the other; ``lengths`` (tokens per unit) go into the record."""
    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(vectors, dtype=np.float16))
    data = buffer.getvalue()
    atomic_write_file(_shard_path(folder, shard), lambda tmp: Path(tmp).write_bytes(data))
    lengths = None if lengths is None else [int(n) for n in lengths]
    extra = {} if lengths is None else {"lengths": lengths}  # inside the checksum: bytes and counts together
    atomic_write_json(_record_path(folder, shard), {**_shard_record(manifest, shard), **extra,
                                                    "sha256": hashlib.sha256(data + _lengths_suffix(lengths)).hexdigest()})


def _record_lengths(record: dict, units: int) -> list[int] | None:
    """The tokens per unit a multi-vector shard's record lists, or None when it lists no such ``units`` counts."""
    lengths = record.get("lengths")
    if not isinstance(lengths, list) or len(lengths) != units or \
            not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in lengths):
        return None
    return lengths


def shard_problem(folder: Path, shard: int, manifest: dict) -> str | None:
    """None when shard ``shard`` is on disk whole and is the one ``write_shard`` wrote for the encoding
    ``manifest`` (its bytes match its record's checksum); else what is wrong with it, in words."""
    path = _shard_path(folder, shard)
    if not path.is_file():
        return "missing"
    start, stop = _shard_record(manifest, shard)["units"]
    try:
        vectors = np.load(path, mmap_mode="r")
    except (OSError, ValueError, EOFError):
        return "incomplete (not a whole .npy file)"
    tokens = bool(manifest.get("token_vectors"))
    if vectors.dtype != np.float16 or vectors.ndim != 2 or (not tokens and vectors.shape[0] != stop - start):
        return f"incomplete (expected {stop - start} float16 vectors)"
    try:
        record = json.loads(_record_path(folder, shard).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return f"no readable checksum record ({_record_path(folder, shard).name})"
    if not isinstance(record, dict) or {k: record.get(k) for k in _shard_record(manifest, shard)} != \
            _shard_record(manifest, shard):
        return f"its checksum record ({_record_path(folder, shard).name}) is of another shard or encoding"
    lengths = None
    if tokens:  # token vectors: as many rows as the record's lengths add up to
        lengths = _record_lengths(record, stop - start)
        if lengths is None:
            return f"its checksum record ({_record_path(folder, shard).name}) lists no token counts of its units"
        if vectors.shape[0] != sum(lengths):
            return f"incomplete (expected {sum(lengths)} float16 token vectors)"
    if _shard_sha256(path, lengths) != record.get("sha256"):
        what = "its token counts or bytes do not" if tokens else "does not"
        return f"{what} match the checksum ssft-encode recorded (replaced or changed since it was written)"
    return None


def shard_complete(folder: Path, shard: int, manifest: dict) -> bool:
    """True when shard ``shard`` of the encoding ``manifest`` is on disk whole and verified (``shard_problem``)."""
    return shard_problem(folder, shard, manifest) is None


def encode_shards(model, unit_ids: list[str], texts: list[str], folder: Path, shard_size: int = 10_000,
                  batch_size: int = 64, settings: dict | None = None) -> dict:
    """Encode ``texts`` with ``model``'s document tower into ``folder/shards/`` (float16, ``shard_size`` units each),
    this process taking every world-size-th shard (``ssft.core.distributed``), shards already complete skipped (a
    resumed run); returns the manifest (``encode.json``: model and corpus fingerprints, precision, shard size, unit
    ids and ``settings``). A folder holding another model's or corpus's shards is refused. The main process writes
    the manifest; all wait for every shard before returning."""
    if shard_size < 1:
        raise SsftError("shard size must be >= 1")
    folder = Path(folder)
    source = model.document_source() if hasattr(model, "document_source") else model  # whose documents these are
    # which model (weights), how it computed (precision, backend), then both with an int8 model's calibration: the
    # first that differs from a folder's is the one a refusal names
    manifest = {"format": SHARDS_FORMAT, "weights": weights_fingerprint(source), "precision": served_as(source),
                "model": model_fingerprint(source), "corpus": corpus_fingerprint(unit_ids, texts),
                "units": len(unit_ids), "shard_size": shard_size, "settings": settings or {}}
    tokens = multi_vector(source)
    if tokens:  # a ColBERT corpus: each unit's token vectors (a dense encoding's manifest has no such key)
        manifest["token_vectors"] = True
    found = read_manifest(folder)
    if found is not None and {k: found.get(k) for k in manifest} != manifest:
        raise SsftError(f"{folder}: holds shards of another encoding ({_difference(found, manifest)}); name another "
                        f"folder, remove it, or encode as it was encoded")
    shards = (len(unit_ids) + shard_size - 1) // shard_size
    rank, world = distributed.rank(), distributed.world_size()
    mine = [s for s in range(shards) if s % world == rank]
    todo = []
    for s in mine:
        problem = shard_problem(folder, s, manifest)
        if problem is not None:
            if problem != "missing":  # never served: a shard that is not the one written here is encoded again
                logger.warning("%s: %s; encoding it again", _shard_path(folder, s), problem)
            todo.append(s)
    if len(todo) < len(mine):
        logger.info("process %d: %d of its %d shards already encoded, skipped", rank, len(mine) - len(todo), len(mine))
    if rank == 0:
        atomic_write_json(folder / MANIFEST, {**manifest, "unit_ids": unit_ids})
    for shard in track(todo, "encoding shards", unit="shards"):
        rows = slice(shard * shard_size, min((shard + 1) * shard_size, len(unit_ids)))
        if tokens:
            matrices = encode_token_corpus(model, texts[rows], batch_size)
            write_shard(folder, shard, np.concatenate(matrices).astype(np.float16), manifest,
                        lengths=[len(m) for m in matrices])
        else:
            write_shard(folder, shard, encode_corpus(model, texts[rows], batch_size).astype(np.float16), manifest)
    distributed.barrier()
    return {**manifest, "unit_ids": unit_ids, "shards": shards}


_DIFFERENCE_NAMES = {"weights": "model", "model": "int8 calibration", "corpus": "corpus texts", "units": "corpus size",
                     "settings": "data folder, model path or passage settings", "token_vectors": "single or token vectors"}


def _difference(found: dict, manifest: dict) -> str:
    """What an earlier encoding in a folder differs in from this one, in words: the model, the precision (both
    named), the int8 calibration, the corpus, the shard size, the passage settings."""
    if "weights" not in found:
        return "written by an earlier ssft-encode"
    key = next(k for k in manifest if found.get(k) != manifest[k])
    if key == "precision":
        return f"precision differs: {found.get(key)} there, {manifest[key]} now"
    if key == "shard_size":
        return f"shard size differs: {found.get(key)} there, {manifest[key]} now"
    return f"{_DIFFERENCE_NAMES.get(key, key)} differs"


def read_manifest(folder: Path) -> dict | None:
    """``encode.json`` of an encoded-corpus folder, or None."""
    path = Path(folder) / MANIFEST
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise SsftError(f"{path}: not a readable manifest of encoded shards") from None
    if not isinstance(manifest, dict) or manifest.get("format") != SHARDS_FORMAT:
        raise SsftError(f"{path}: not a manifest of ssft-encode shards (format {SHARDS_FORMAT})")
    for key, kind in _MANIFEST_KEYS.items():  # what reading the shards and the index relies on
        value = manifest.get(key)
        if not isinstance(value, kind) or isinstance(value, bool) or (kind is int and value < (key == "shard_size")):
            raise SsftError(f"{path}: not a manifest of ssft-encode shards ('{key}' missing or malformed)")
    if len(manifest["unit_ids"]) != manifest["units"] or not all(isinstance(u, str) for u in manifest["unit_ids"]):
        raise SsftError(f"{path}: not a manifest of ssft-encode shards ('unit_ids' is not {manifest['units']} ids)")
    return manifest


def read_shards(folder: Path, manifest: dict) -> Iterator[np.ndarray]:
    """The shards of ``folder`` in order (float16, memory-mapped), each verified against its record first; a
    missing, short or changed shard is an error."""
    size, units = manifest["shard_size"], manifest["units"]
    for shard in range((units + size - 1) // size):
        problem = shard_problem(folder, shard, manifest)
        if problem is not None:
            raise SsftError(f"{_shard_path(folder, shard)}: {problem}; run ssft-encode again (it encodes this shard anew)")
        yield np.load(_shard_path(folder, shard), mmap_mode="r")


def read_token_lengths(folder: Path, manifest: dict) -> np.ndarray:
    """Tokens per unit (int64, in unit order) of a multi-vector encoding, from the shards' records (read as
    ``read_shards`` verifies them)."""
    size, units = manifest["shard_size"], manifest["units"]
    parts = []
    for shard in range((units + size - 1) // size):
        start, stop = _shard_record(manifest, shard)["units"]
        try:
            record = json.loads(_record_path(folder, shard).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError, UnicodeDecodeError):
            record = None
        lengths = _record_lengths(record, stop - start) if isinstance(record, dict) else None
        if lengths is None:
            raise SsftError(f"{_record_path(folder, shard)}: lists no token counts of its units; run ssft-encode again")
        parts.append(np.asarray(lengths, dtype=np.int64))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def corpus_difference(manifest: dict, dataset: IRDataset) -> str | None:
    """None when ``dataset``'s corpus is the one the encoded folder of ``manifest`` holds: the same units (under the
    folder's passage settings) with the same texts, in any order (an index maps each row to its unit id); else what
    changed, in words, counted in documents."""
    settings = manifest.get("settings") or {}
    passages = bool(settings.get("passage_words"))
    unit_ids, texts = corpus_units(dataset, settings.get("passage_words"), settings.get("passage_stride"))
    indexed = manifest["unit_ids"]
    if unit_ids == indexed and corpus_fingerprint(unit_ids, texts) == manifest["corpus"]:
        return None
    text_of = dict(zip(unit_ids, texts))
    if len(text_of) == len(indexed) and all(u in text_of for u in indexed) and \
            corpus_fingerprint(indexed, [text_of[u] for u in indexed]) == manifest["corpus"]:
        return None  # the same units in another order
    # documents, not passages: a changed text can change its number of passages
    was = set(u.rsplit("#", 1)[0] for u in indexed) if passages else set(indexed)
    now = set(dataset.corpus)
    gone, new = len(was - now), len(now - was)
    if not gone and not new:
        return f"the same {len(was)} documents, but their texts differ"
    parts = [f"{gone} of the {len(was)} indexed documents {'is' if gone == 1 else 'are'} missing"] if gone else []
    if new:
        parts.append(f"{new} document{' is' if new == 1 else 's are'} not indexed")
    return ", ".join(parts)


__all__ = ["corpus_difference", "corpus_units", "corpus_vectors", "encode_corpus", "encode_query_texts",
           "encode_query_tokens", "encode_shards", "encode_token_corpus", "file_sha256", "multi_vector", "read_manifest",
           "read_shards", "read_token_lengths", "shard_complete", "shard_problem", "split_passages", "write_shard"]

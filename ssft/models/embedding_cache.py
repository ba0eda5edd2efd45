"""On-disk cache of document representations (ColBERT's per-token embeddings) for repeated evaluation.

A cache file is named by two fingerprints and holds nothing else than what they describe:

- model fingerprint: SHA-256 of the ranker class, its spec (base model, method and options, lengths), the
  tokenizer's class and vocabulary size, the precision and backend it computes in (``ssft.core.precision``: fp32,
  bf16 and int8 representations differ), a statically quantised model's int8 calibration (its fingerprint: another
  calibration set quantises to other vectors), and every tensor of the ranker's state dict (name, dtype, shape,
  bytes; an int8 model's packed weights included).
  Query-only modules are included too: a needless miss at worst, never a wrong hit.
- corpus fingerprint: SHA-256 of the ids and texts of the documents encoded, in order.

Files live in ``$SSFT_CACHE/embeddings/`` (default ``~/.cache/ssft``), are safetensors (no pickle), written
under a temporary name and renamed, and are checked against both fingerprints, the id list and, for per-token
representations, the tokens per document (their fingerprint in the metadata) on reading.
The cache is used only for a frozen ranker (no parameter requires grad: a loaded model, or the trained model
once training is over), so training-time validation never hashes a model whose weights change every step.
``SSFT_EMBEDDING_CACHE=0`` turns it off.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, safe_open, save_file

from ssft.core.precision import calibration_of, served_as
from ssft.data.beir import cache_home
from ssft.models.encoded import Encoded

logger = logging.getLogger(__name__)

FORMAT = "ssft-document-embeddings/2"  # /2: the tokens per document inside the metadata's fingerprints


def cache_dir() -> Path:
    """``$SSFT_CACHE/embeddings``."""
    return cache_home() / "embeddings"


def cache_enabled(model: torch.nn.Module) -> bool:
    """True for rankers that opt in (``cache_document_embeddings``), are frozen, and when not turned off."""
    if os.environ.get("SSFT_EMBEDDING_CACHE", "1").lower() in ("0", "false", "no", "off"):
        return False
    if not getattr(model, "cache_document_embeddings", False):
        return False
    return not any(p.requires_grad for p in model.parameters())


def _update_tensor(digest, name: str, tensor) -> None:
    if isinstance(tensor, (tuple, list)):  # an int8 linear layer's packed parameters: (weight, bias)
        for i, item in enumerate(tensor):
            _update_tensor(digest, f"{name}.{i}", item)
        return
    if not isinstance(tensor, torch.Tensor):  # e.g. the dtype entry of a quantised layer
        digest.update(f"{name}|{tensor!r}|".encode())
        return
    t = tensor.detach().to("cpu")
    if t.is_quantized:
        digest.update(f"{name}|{t.dtype}|{t.qscheme()}|".encode())
        scales = t.q_per_channel_scales() if t.qscheme() in (torch.per_channel_affine, torch.per_channel_symmetric) \
            else torch.tensor([t.q_scale()])
        _update_tensor(digest, f"{name}.scale", scales)
        t = t.int_repr()
    t = t.contiguous()
    digest.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
    digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())


def _fingerprint(model: torch.nn.Module, served: bool) -> str:
    digest = hashlib.sha256()
    tokenizer = getattr(model, "tokenizer", None)
    header = {"class": f"{type(model).__module__}.{type(model).__qualname__}",
              "spec": getattr(model, "spec", {}),
              "tokenizer": [type(tokenizer).__name__, len(tokenizer) if tokenizer is not None else 0]}
    if served:  # how it computes: its precision and backend (openvino:int8), and an int8 model's calibration
        header.update(precision=served_as(model), calibration=calibration_of(model))
    digest.update(json.dumps(header, sort_keys=True, default=str).encode())
    for name, tensor in sorted(model.state_dict().items()):
        _update_tensor(digest, name, tensor)
    return digest.hexdigest()


def model_fingerprint(model: torch.nn.Module) -> str:
    """Hex SHA-256 of everything that decides a ranker's document representations (see module docstring): its
    weights (``weights_fingerprint``), the precision and backend it computes in, and an int8 model's calibration."""
    return _fingerprint(model, served=True)


def weights_fingerprint(model: torch.nn.Module) -> str:
    """Hex SHA-256 of which model ``model`` is, whatever it computes in: class, spec, tokenizer and state dict, not
    its precision, backend or calibration (bf16 and OpenVINO serving leave the float32 weights as they are). What
    an index is checked against when its queries are served at another precision than its documents were."""
    return _fingerprint(model, served=False)


def corpus_fingerprint(doc_ids: list[str], texts: list[str]) -> str:
    """Hex SHA-256 of the (id, text) pairs, in order."""
    digest = hashlib.sha256()
    for doc_id, text in zip(doc_ids, texts, strict=True):
        for part in (doc_id, text):
            data = part.encode("utf-8")
            digest.update(len(data).to_bytes(8, "little"))
            digest.update(data)
    return digest.hexdigest()


def cache_path(model_fp: str, corpus_fp: str) -> Path:
    return cache_dir() / f"{model_fp[:32]}-{corpus_fp[:32]}.safetensors"


def _read(path: Path, doc_ids: list[str], model_fp: str, corpus_fp: str):
    """The cached representations, or None when the file is absent, unreadable or describes something else."""
    if not path.is_file():
        return None
    try:
        with safe_open(str(path), framework="pt") as fh:
            meta = fh.metadata() or {}
        if (meta.get("format") != FORMAT or meta.get("model") != model_fp or meta.get("corpus") != corpus_fp
                or json.loads(meta.get("doc_ids", "null")) != doc_ids):
            return None
        tensors = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as err:
        logger.warning("%s: unreadable embedding cache, recomputing (%s)", path,
                       str(err).splitlines()[0] if str(err) else type(err).__name__)
        return None
    vectors = tensors["vectors"]
    if "mask" not in tensors:
        return [Encoded(vectors[i : i + 1]) for i in range(vectors.shape[0])]
    mask, lengths = tensors["mask"].bool(), tensors["lengths"].tolist()
    # the token counts cut the vectors into documents: other counts (same total) would be other documents' tokens
    if len(lengths) != len(doc_ids) or sum(lengths) != vectors.shape[0] or meta.get("tokens") != _tokens(lengths):
        return None
    out, start = [], 0
    for n in lengths:
        out.append(Encoded(vectors[start : start + n].unsqueeze(0), mask[start : start + n].unsqueeze(0)))
        start += n
    return out


def _tokens(lengths: list[int]) -> str:
    """Hex SHA-256 of the tokens per document of a multi-vector entry, as its metadata records them."""
    return hashlib.sha256(json.dumps([int(n) for n in lengths]).encode()).hexdigest()


def _write(path: Path, doc_ids: list[str], reps: list, model_fp: str, corpus_fp: str) -> None:
    if reps[0].mask is None:
        tensors = {"vectors": torch.cat([r.vectors for r in reps]).contiguous()}
    else:
        tensors = {"vectors": torch.cat([r.vectors[0] for r in reps]).contiguous(),
                   "mask": torch.cat([r.mask[0] for r in reps]).to(torch.uint8).contiguous(),
                   "lengths": torch.tensor([r.vectors.shape[1] for r in reps], dtype=torch.long)}
    meta = {"format": FORMAT, "model": model_fp, "corpus": corpus_fp, "doc_ids": json.dumps(doc_ids)}
    if "lengths" in tensors:
        meta["tokens"] = _tokens(tensors["lengths"].tolist())
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        save_file({k: v.cpu() for k, v in tensors.items()}, tmp, metadata=meta)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def cached_documents(model: torch.nn.Module, doc_ids: list[str], texts: list[str], encode: Callable[[], list]) -> list:
    """Representations of ``doc_ids`` (one ``Encoded`` per document): from the cache when model and documents
    match a stored file, else ``encode()`` and store the result (when the cache applies to ``model``). A model
    whose documents another model encodes (``document_source()``, an asymmetric student and its teacher) shares
    that model's cache."""
    if hasattr(model, "document_source"):
        model = model.document_source()
    if not doc_ids or not cache_enabled(model):
        return encode()
    model_fp = model_fingerprint(model)
    corpus_fp = corpus_fingerprint(doc_ids, texts)
    path = cache_path(model_fp, corpus_fp)
    device = next(model.parameters()).device
    cached = _read(path, doc_ids, model_fp, corpus_fp)
    if cached is not None:
        logger.info("document embeddings of %d documents read from %s", len(doc_ids), path)
        return [type(r)(r.vectors.to(device), None if r.mask is None else r.mask.to(device)) for r in cached]
    reps = encode()
    try:
        _write(path, doc_ids, reps, model_fp, corpus_fp)
        logger.info("document embeddings of %d documents cached in %s", len(doc_ids), path)
    except OSError as err:  # a read-only or full cache folder costs speed, not correctness
        logger.warning("could not write the embedding cache %s: %s", path, err)
    return reps

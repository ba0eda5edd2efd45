"""Persistent faiss indexes over a corpus encoded by ``ssft-encode`` (``ssft.models.corpus.encode_shards``): built
once from the float16 shards, written with ``faiss.write_index``, reloaded by later retrievals (``ssft-retrieve
--index-dir``) memory-mapped where faiss allows it (``IO_FLAG_MMAP``: IVF inverted lists; ``IO_FLAG_MMAP_IFC``: flat
codes), so retrieval memory is bounded by the index, not by the corpus or its vectors.

Index kinds (000 Eq. 3-4's inner product throughout), as ``faiss.index_factory`` strings: ``flat`` (exact),
``ivf`` (``IVF{nlist},Flat``), ``hnsw`` (``HNSW32``), ``pq`` (``PQ{m}x8np``), ``ivfpq`` (``IVF{nlist},PQ{m}x8np``), or
any factory string given as is (``IVF4096,PQ32x8``, ``OPQ16,IVF1024,PQ16``). Trained kinds learn from an even sample
of at most ``max_train`` vectors; vectors are added shard by shard.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from ssft.core.errors import SsftError
from ssft.core.io import atomic_write_file, atomic_write_json
from ssft.models.corpus import read_manifest, read_shards

INDEX_FILE = "index.faiss"
INDEX_INFO = "index.json"
KINDS = ("flat", "ivf", "hnsw", "pq", "ivfpq")


def factory_string(kind: str, n: int, dim: int, nlist: int | None = None, pq_m: int = 16, hnsw_m: int = 32) -> str:
    """The ``faiss.index_factory`` string of an index kind for ``n`` vectors of ``dim`` (a factory string as is)."""
    if kind not in KINDS:
        if kind and kind[0].isupper():  # a factory string of the user's own
            return kind
        raise SsftError(f"index '{kind}': expected one of {', '.join(KINDS)} or a faiss index_factory string "
                        f"(e.g. IVF1024,PQ32x8)")
    nlist = nlist or max(1, min(int(4 * np.sqrt(n)), n // 39 or 1))  # faiss warns under 39 points per list
    if kind in ("pq", "ivfpq") and dim % pq_m:
        raise SsftError(f"index '{kind}': the vector size {dim} is not a multiple of pq_m={pq_m}")
    bits = max(1, min(8, int(np.log2(max(n, 2)))))
    # "np": no polysemous training (a permutation search that takes minutes and only serves Hamming filtering)
    return {"flat": "Flat", "ivf": f"IVF{nlist},Flat", "hnsw": f"HNSW{hnsw_m}", "pq": f"PQ{pq_m}x{bits}np",
            "ivfpq": f"IVF{nlist},PQ{pq_m}x{bits}np"}[kind]


def _training_sample(folder: Path, manifest: dict, max_train: int) -> np.ndarray:
    """An even sample (every k-th vector) of at most ``max_train`` vectors over all shards, float32."""
    step = max(1, -(-manifest["units"] // max_train))
    parts, offset = [], 0
    for shard in read_shards(folder, manifest):
        first = (-offset) % step
        parts.append(np.asarray(shard[first::step], dtype=np.float32))
        offset += shard.shape[0]
    return np.ascontiguousarray(np.concatenate(parts)[:max_train])


def build_saved_index(folder: Path, kind: str = "flat", nprobe: int = 16, max_train: int = 200_000,
                      ef_search: int = 128) -> dict[str, Any]:
    """Build the index of the shards in ``folder`` and write ``index.faiss`` and ``index.json`` (atomically; an
    earlier index is replaced). Returns index.json's content."""
    import faiss  # noqa: PLC0415 -- optional and heavy: only full retrieval needs it

    folder = Path(folder)
    manifest = read_manifest(folder)
    if manifest is None:
        raise SsftError(f"{folder}: no encoded shards (encode.json); run ssft-encode first")
    first = next(read_shards(folder, manifest), None)
    if first is None:
        raise SsftError(f"{folder}: the encoded corpus is empty")
    dim = first.shape[1]
    spec = factory_string(kind, manifest["units"], dim)
    try:
        index = faiss.index_factory(dim, spec, faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as err:
        raise SsftError(f"index '{spec}': faiss cannot build it ({str(err).strip().splitlines()[-1]})") from None
    if not index.is_trained:
        index.train(_training_sample(folder, manifest, max_train))
    for shard in tqdm(read_shards(folder, manifest), total=-(-manifest["units"] // manifest["shard_size"]),
                      desc=f"indexing ({spec})", unit="shard"):
        index.add(np.ascontiguousarray(shard, dtype=np.float32))
    atomic_write_file(folder / INDEX_FILE, lambda tmp: faiss.write_index(index, tmp))
    info = {"factory": spec, "kind": kind, "vectors": int(index.ntotal), "dim": dim, "nprobe": nprobe,
            "ef_search": ef_search, "model": manifest["model"], "precision": manifest["precision"],
            "corpus": manifest["corpus"]}
    atomic_write_json(folder / INDEX_INFO, info)
    return info


@dataclass
class SavedIndex:
    """A reloaded index: the faiss index, the unit id of each of its rows, index.json and encode.json."""

    index: Any
    unit_ids: list[str]
    info: dict[str, Any]
    manifest: dict[str, Any]

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        return self.index.search(np.ascontiguousarray(queries, dtype=np.float32), k)


def load_index(folder: Path, mmap: bool = True) -> SavedIndex:
    """The index ``build_saved_index`` wrote in ``folder``, memory-mapped where the index type allows (``mmap``),
    with its search parameters (IVF ``nprobe``, HNSW ``efSearch``) set."""
    import faiss  # noqa: PLC0415 -- optional and heavy: only full retrieval needs it

    folder = Path(folder)
    manifest = read_manifest(folder)
    if manifest is None or not (folder / INDEX_FILE).is_file() or not (folder / INDEX_INFO).is_file():
        raise SsftError(f"{folder}: no saved index (expected {INDEX_FILE} and {INDEX_INFO}; run ssft-encode)")
    try:
        info = json.loads((folder / INDEX_INFO).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise SsftError(f"{folder / INDEX_INFO}: not readable JSON") from None
    # IVF: the inverted lists memory-mapped (IO_FLAG_MMAP); flat codes (Flat, PQ, HNSW storage): IO_FLAG_MMAP_IFC;
    # read whole where faiss maps neither
    mapped = faiss.IO_FLAG_MMAP if "IVF" in str(info.get("factory", "")) else faiss.IO_FLAG_MMAP_IFC
    index, error = None, None
    for flags in ([mapped | faiss.IO_FLAG_READ_ONLY] if mmap else []) + [0]:
        try:
            index = faiss.read_index(str(folder / INDEX_FILE), flags)
            break
        except RuntimeError as err:
            error = err
    if index is None:
        raise SsftError(f"{folder / INDEX_FILE}: faiss cannot read it ({str(error).strip().splitlines()[-1]})")
    if index.ntotal != len(manifest["unit_ids"]) or info.get("corpus") != manifest["corpus"]:
        raise SsftError(f"{folder}: {INDEX_FILE} does not match encode.json (re-run ssft-encode to rebuild it)")
    try:
        faiss.extract_index_ivf(index).nprobe = int(info.get("nprobe", 16))
    except RuntimeError:  # not an IVF index
        pass
    hnsw = getattr(faiss.downcast_index(index), "hnsw", None)
    if hnsw is not None:
        hnsw.efSearch = int(info.get("ef_search", 128))
    return SavedIndex(index, manifest["unit_ids"], info, manifest)


__all__ = ["INDEX_FILE", "INDEX_INFO", "KINDS", "SavedIndex", "build_saved_index", "factory_string", "load_index"]

"""Persistent faiss indexes over a corpus encoded by ``ssft-encode`` (``ssft.models.corpus.encode_shards``): built
once from the float16 shards, written with ``faiss.write_index``, reloaded by later retrievals (``ssft-retrieve
--index-dir``) memory-mapped where faiss allows it (``IO_FLAG_MMAP``: IVF inverted lists; ``IO_FLAG_MMAP_IFC``: flat
codes), so retrieval memory is bounded by the index, not by the corpus or its vectors.

Index kinds (000 Eq. 3-4's inner product throughout), as ``faiss.index_factory`` strings: ``flat`` (exact),
``ivf`` (``IVF{nlist},Flat``), ``hnsw`` (``HNSW32``), ``pq`` (``PQ{m}x8np``), ``ivfpq`` (``IVF{nlist},PQ{m}x8np``), or
any factory string given as is (``IVF4096,PQ32x8``, ``OPQ16,IVF1024,PQ16``); for a ColBERT model's token vectors also
``plaid`` (``ssft.eval.plaid``: centroid ids + 2-bit residuals, PLAID's pruned search; written as ``index.plaid``,
not a faiss file). Trained kinds learn from an even sample
of at most ``max_train`` vectors (more where the index needs more); vectors are added shard by shard. An index that
needs more training vectors than the corpus has (more IVF lists or PQ centroids than vectors) is refused by
``check_index``, before encoding where the caller knows the unit count.

Fingerprints, not trust: ``index.json`` records the SHA-256 of ``index.faiss`` (checked on every load: an index file
replaced by another of the same size is refused) besides the fingerprints of the encoding it was built from
(``encoding_fingerprints``: the model's weights, its precision, backend and int8 calibration, the corpus, the unit ids
in row order, a token index's tokens per unit), each compared with ``encode.json`` and the shards' records on every
load (an ``index.faiss`` + ``index.json`` copied from another model's folder is refused); the
shards are verified against their own checksums while the index is built (``ssft.models.corpus.read_shards``); and
``load_index(folder, dataset=...)`` refuses a dataset whose corpus is not the one indexed (``corpus_difference``).

IVF ``nprobe`` (lists searched per query): given, or calibrated when the index is built (``calibrate_nprobe``): the
fewest lists at which the index finds ``CALIBRATION_RECALL`` of the exact top-100 of stored vectors searched as
queries. Stored vectors are easier queries than real ones (each lies in its own list), hence the high target: on
NFCorpus with all-MiniLM-L6-v2 (93 lists) the calibrated count, 64, finds 0.986 of the exact top-100 of the real
test queries, where a fixed 16 lists found 0.765 (BENCHMARKS.md § index_search).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ssft.core.errors import SsftError
from ssft.core.io import atomic_write_file, atomic_write_json
from ssft.core.progress import track
from ssft.data.beir import IRDataset
from ssft.eval.plaid import DEFAULT_BITS, PLAID_FILE, PlaidIndex, check_plaid_options
from ssft.models.corpus import corpus_difference, file_sha256, read_manifest, read_shards, read_token_lengths

INDEX_FILE = "index.faiss"
INDEX_INFO = "index.json"
CORPUS_FILE = "corpus.jsonl"  # a corpus of the user's own (ssft.index over a file or a list), kept with its index
KINDS = ("flat", "ivf", "hnsw", "pq", "ivfpq", "plaid")
PLAID = "plaid"  # not a faiss index: ssft.eval.plaid, token vectors only


def factory_string(kind: str, n: int, dim: int, nlist: int | None = None, pq_m: int = 16, hnsw_m: int = 32) -> str:
    """The ``faiss.index_factory`` string of an index kind for ``n`` vectors of ``dim`` (a factory string as is)."""
    if kind == PLAID:
        return "PLAID"
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


CALIBRATION_RECALL = 0.99
CALIBRATION_QUERIES = 256


def probe_counts(nlist: int) -> list[int]:
    """The nprobe values ``calibrate_nprobe`` tries: 1, 2, 3, 4, 6, 8, 12, ... (about 1.4x apart) up to ``nlist``."""
    counts, power = [], 1
    while power < nlist:
        counts += [c for c in sorted({power, power + power // 2}) if c < nlist]
        power *= 2
    return counts + [nlist]


def calibrate_nprobe(index: Any, vectors: np.ndarray, k: int = 100, target: float = CALIBRATION_RECALL,
                     queries: int = CALIBRATION_QUERIES) -> tuple[int, float]:
    """``(nprobe, recall)``: the fewest IVF lists (``probe_counts``) at which ``index`` (filled with ``vectors``'
    rows, and maybe more) finds ``target`` of what it finds searching every list, in the top-``k`` of an even sample
    of ``queries`` rows of ``vectors`` (searching every list is exact for IVF-Flat, the quantiser's own ceiling for
    IVF-PQ); ``recall`` is that overlap. The index's nprobe is left at the value returned."""
    import faiss  # noqa: PLC0415 -- optional and heavy: only full retrieval needs it

    ivf = faiss.extract_index_ivf(index)
    sample = np.ascontiguousarray(vectors[:: max(1, len(vectors) // queries)][:queries], dtype=np.float32)
    k = min(k, int(index.ntotal))
    ivf.nprobe = ivf.nlist
    _, every = index.search(sample, k)
    wanted = [set(row[row >= 0].tolist()) for row in every]
    counts = probe_counts(int(ivf.nlist))
    for nprobe in counts:  # the last, every list, finds all of it
        ivf.nprobe = nprobe
        _, found = index.search(sample, k)
        recall = float(np.mean([len(w & set(f.tolist())) / max(1, len(w)) for w, f in zip(wanted, found)]))
        if recall >= target or nprobe == counts[-1]:
            break
    return nprobe, recall


def set_nprobe(index: Any, nprobe: int | None, vectors: np.ndarray) -> int | None:
    """Set an IVF ``index``'s nprobe to ``nprobe``, or with None to ``calibrate_nprobe``'s over ``vectors``; returns
    the nprobe set (None: not an IVF index)."""
    import faiss  # noqa: PLC0415 -- optional and heavy: only full retrieval needs it

    if not _is_ivf(index):
        return None
    if nprobe is None:
        return calibrate_nprobe(index, vectors)[0]
    faiss.extract_index_ivf(index).nprobe = nprobe
    return nprobe


def _training_needs(index: Any) -> list[tuple[int, str]]:
    """(vectors, why) for each part of a faiss index that cannot learn from fewer vectors: k-means needs a vector
    per centroid (IVF lists, the 2^bits centroids of each PQ / OPQ / additive quantizer step), an additive quantizer
    and OPQ's rotation at least one per dimension (OPQ on fewer crashes faiss), a PCA one per output dimension."""
    import faiss  # noqa: PLC0415 -- optional and heavy: only full retrieval needs it

    needs: list[tuple[int, str]] = []
    index = faiss.downcast_index(index)
    if isinstance(index, faiss.IndexPreTransform):
        for i in range(index.chain.size()):
            transform = faiss.downcast_VectorTransform(index.chain.at(i))
            if isinstance(transform, faiss.OPQMatrix):  # a PQ of its own (256 centroids) and a d_in x d_in rotation
                needs.append((max(256, transform.d_in), f"OPQ on {transform.d_in} dimensions, 256 centroids each"))
            elif isinstance(transform, faiss.PCAMatrix):
                needs.append((transform.d_out, f"a PCA to {transform.d_out} dimensions"))
        index = faiss.downcast_index(index.index)
    ivf = faiss.try_extract_index_ivf(index)
    if ivf is not None:
        needs.append((int(ivf.nlist), f"{ivf.nlist} inverted lists"))
    storage = getattr(index, "storage", None)  # HNSW over PQ codes
    for holder in (index, ivf, faiss.downcast_index(storage) if storage is not None else None):
        pq = getattr(holder, "pq", None)
        if pq is not None:
            needs.append((int(pq.ksub), f"{pq.ksub} centroids per PQ sub-quantizer"))
        for name in ("rq", "lsq", "prq", "plsq"):
            quantizer = getattr(holder, name, None)
            if quantizer is not None and hasattr(quantizer, "nbits"):
                k = 2 ** int(max(faiss.vector_to_array(quantizer.nbits)))
                dims = quantizer.d // int(getattr(quantizer, "nsplits", 1))
                needs.append((max(k, dims), f"{name.upper()}: {k} centroids per step on {dims} dimensions"))
    return needs


def check_index(kind: str, units: int, dim: int) -> tuple[str, int]:
    """(faiss factory string, training vectors faiss needs, 0 for an index that learns nothing) of index ``kind``
    over ``units`` vectors of ``dim``; refused in one line naming ``--index`` when the corpus has fewer vectors than
    the index needs to train (an IVF with more lists than vectors, a PQ with more centroids than vectors)."""
    import faiss  # noqa: PLC0415 -- optional and heavy: only full retrieval needs it

    if kind == PLAID:  # k-means over the tokens: a centroid per 8 tokens at most, any number of tokens from 8

        check_plaid_options(bits=DEFAULT_BITS, dim=dim)
        if units < 8:
            raise SsftError(f"--index plaid: needs at least 8 token vectors to train its centroids, the corpus has "
                            f"{units}; use --index flat")
        return "PLAID", 8
    spec = factory_string(kind, units, dim)
    try:
        index = faiss.index_factory(dim, spec, faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as err:
        raise SsftError(f"index '{spec}': faiss cannot build it ({str(err).strip().splitlines()[-1]})") from None
    needs = _training_needs(index) if not index.is_trained else []
    need, why = max(needs, default=(1 if not index.is_trained else 0, "training"))
    if units < need:
        named = kind if kind == spec else f"{kind} ({spec})"
        raise SsftError(f"--index {named}: faiss needs at least {need} training vectors ({why}), the corpus has "
                        f"{units} vectors; name an index with fewer lists or centroids, or use --index flat or hnsw")
    return spec, need


def index_rows(folder: Path, manifest: dict) -> int:
    """Vectors the index of an encoded folder holds: one per unit, or every token of a multi-vector encoding."""
    if manifest.get("token_vectors"):
        return int(read_token_lengths(folder, manifest).sum())
    return int(manifest["units"])


def _training_sample(folder: Path, manifest: dict, max_train: int, rows: int) -> np.ndarray:
    """An even sample (every k-th vector) of at most ``max_train`` of the ``rows`` vectors of all shards, float32."""
    step = max(1, -(-rows // max_train))
    parts, offset = [], 0
    for shard in read_shards(folder, manifest):
        first = (-offset) % step
        parts.append(np.asarray(shard[first::step], dtype=np.float32))
        offset += shard.shape[0]
    return np.ascontiguousarray(np.concatenate(parts)[:max_train])


def build_saved_index(folder: Path, kind: str = "flat", nprobe: int | None = None, max_train: int = 200_000,
                      ef_search: int = 128) -> dict[str, Any]:
    """Build the index of the shards in ``folder`` (each verified against its checksum) and write ``index.faiss``
    and ``index.json`` (atomically; an earlier index is replaced; index.json records index.faiss's SHA-256).
    ``nprobe``: IVF lists searched per query (None: ``calibrate_nprobe`` on the training sample); recorded as None
    for an index that is not IVF.
    Returns index.json's content."""
    import faiss  # noqa: PLC0415 -- optional and heavy: only full retrieval needs it

    folder = Path(folder)
    manifest = read_manifest(folder)
    if manifest is None:
        raise SsftError(f"{folder}: no encoded shards (encode.json); run ssft-encode first")
    first = next(read_shards(folder, manifest), None)
    if first is None:
        raise SsftError(f"{folder}: the encoded corpus is empty")
    dim = first.shape[1]
    rows = index_rows(folder, manifest)
    spec, need = check_index(kind, rows, dim)
    if kind == PLAID:
        return _build_plaid(folder, manifest, nprobe, ef_search)
    index = faiss.index_factory(dim, spec, faiss.METRIC_INNER_PRODUCT)
    sample = None
    if not index.is_trained:
        sample = _training_sample(folder, manifest, max(max_train, need), rows)
        try:
            index.train(sample)
        except RuntimeError as err:  # a need _training_needs does not know of
            raise SsftError(f"--index {kind}: faiss cannot train '{spec}' on {len(sample)} vectors "
                            f"({str(err).strip().splitlines()[-1]})") from None
    for shard in track(read_shards(folder, manifest), f"indexing ({spec})",
                       total=-(-manifest["units"] // manifest["shard_size"]), unit="shards"):
        index.add(np.ascontiguousarray(shard, dtype=np.float32))
    # an IVF index is trained: its calibration queries are every k-th row of the training sample (every k-th stored
    # vector where the sample holds them all), not another pass over the shards
    calibration = sample[:: -(-len(sample) // CALIBRATION_QUERIES)] if sample is not None else None
    nprobe = set_nprobe(index, nprobe, calibration) if calibration is not None else None
    checksum: dict[str, str] = {}

    def write(tmp: str) -> None:
        faiss.write_index(index, tmp)
        checksum["sha256"] = file_sha256(Path(tmp))

    atomic_write_file(folder / INDEX_FILE, write)
    _remove_other(folder, INDEX_FILE)
    info = {"factory": spec, "kind": kind, "vectors": int(index.ntotal), "dim": dim, "nprobe": nprobe,
            "ef_search": ef_search, **encoding_fingerprints(folder, manifest), "sha256": checksum["sha256"]}
    atomic_write_json(folder / INDEX_INFO, info)
    return info


def _is_ivf(index: Any) -> bool:
    import faiss  # noqa: PLC0415 -- optional and heavy: only full retrieval needs it

    try:
        faiss.extract_index_ivf(index)
    except RuntimeError:
        return False
    return True


def _remove_other(folder: Path, written: str) -> None:
    """The index file of the other format (index.faiss beside a new index.plaid, or the reverse), left by an earlier
    build: index.json names the one written now."""

    for name in (INDEX_FILE, PLAID_FILE):
        if name != written and (folder / name).is_file():
            (folder / name).unlink()


def _build_plaid(folder: Path, manifest: dict, nprobe: int | None, ef_search: int) -> dict[str, Any]:
    """``build_saved_index`` for kind ``plaid``: ``index.plaid`` from the token shards, ``index.json`` beside it."""

    if not manifest.get("token_vectors"):
        raise SsftError(f"--index plaid: {folder} holds single vectors of a dense model; plaid indexes a ColBERT "
                        f"model's token vectors (use flat, ivf, hnsw, pq or ivfpq)")
    shards = list(read_shards(folder, manifest))  # memory-mapped, each verified against its checksum
    plaid = PlaidIndex.build(shards, read_token_lengths(folder, manifest))
    checksum: dict[str, str] = {}

    def write(tmp: str) -> None:
        checksum["sha256"] = plaid.save(Path(tmp))

    atomic_write_file(folder / PLAID_FILE, write)
    _remove_other(folder, PLAID_FILE)
    meta = plaid.meta
    info = {"factory": f"PLAID{meta['ncentroids']},RES{meta['bits']}", "kind": PLAID, "file": PLAID_FILE,
            "vectors": plaid.ntotal, "dim": plaid.dim, "nprobe": nprobe, "ef_search": ef_search,
            "ncentroids": meta["ncentroids"], "bits": meta["bits"], "seed": meta["seed"],
            "bytes_per_token": round(plaid.bytes_per_token(), 2), **encoding_fingerprints(folder, manifest),
            "sha256": checksum["sha256"]}
    atomic_write_json(folder / INDEX_INFO, info)
    return info


def encoding_fingerprints(folder: Path, manifest: dict) -> dict[str, Any]:
    """What an index records of the encoding it was built from, and is checked against on every load: the model
    (weights, and with its precision, backend and int8 calibration), the precision, the corpus (units and texts),
    the unit ids in row order and, for token vectors, the tokens per unit."""
    info: dict[str, Any] = {"weights": manifest.get("weights"), "model": manifest["model"],
                            "precision": manifest["precision"], "corpus": manifest["corpus"],
                            "units": hashlib.sha256(json.dumps(manifest["unit_ids"]).encode("utf-8")).hexdigest()}
    if manifest.get("token_vectors"):  # a ColBERT index: its rows are tokens, searched then re-scored by MaxSim
        info["token_vectors"] = True
        lengths = read_token_lengths(folder, manifest).astype("<i8")
        info["tokens"] = hashlib.sha256(lengths.tobytes()).hexdigest()
    return info


def encoding_difference(folder: Path, manifest: dict, info: dict) -> str | None:
    """None when ``info`` (index.json) was built from the encoding of ``manifest`` (encode.json); else which of its
    fingerprints (``encoding_fingerprints``) differs, in words."""
    names = {"weights": "model", "model": "model, precision or int8 calibration", "precision": "precision",
             "corpus": "corpus", "units": "unit ids", "token_vectors": "single or token vectors",
             "tokens": "tokens per document"}
    for key, value in encoding_fingerprints(folder, manifest).items():
        if info.get(key) != value:
            return f"{names.get(key, key)} differs"
    return None


@dataclass
class SavedIndex:
    """A reloaded index: the faiss index, the unit id of each of its rows, index.json and encode.json."""

    index: Any
    unit_ids: list[str]
    info: dict[str, Any]
    manifest: dict[str, Any]

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        return self.index.search(np.ascontiguousarray(queries, dtype=np.float32), k)


def load_index(folder: Path, mmap: bool = True, dataset: IRDataset | None = None) -> SavedIndex:
    """The index ``build_saved_index`` wrote in ``folder``, memory-mapped where the index type allows (``mmap``),
    with its search parameters (IVF ``nprobe``, HNSW ``efSearch``) set. ``index.faiss`` must match the checksum in
    ``index.json``; with ``dataset`` (ssft-retrieve's ``--data``), its corpus must be the one indexed."""
    import faiss  # noqa: PLC0415 -- optional and heavy: only full retrieval needs it


    folder = Path(folder)
    manifest = read_manifest(folder)
    if manifest is None or not (folder / INDEX_INFO).is_file() or not any(
            (folder / name).is_file() for name in (INDEX_FILE, PLAID_FILE)):
        raise SsftError(f"{folder}: no saved index (expected {INDEX_FILE} and {INDEX_INFO}; run ssft-encode)")
    try:
        info = json.loads((folder / INDEX_INFO).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise SsftError(f"{folder / INDEX_INFO}: not readable JSON") from None
    plaid = isinstance(info, dict) and info.get("kind") == PLAID
    name = PLAID_FILE if plaid else INDEX_FILE
    if not isinstance(info, dict) or not info.get("sha256"):
        raise SsftError(f"{folder / INDEX_INFO}: records no checksum of {name} (written by an earlier "
                        f"ssft-encode); run ssft-encode again to rebuild the index")
    if not (folder / name).is_file():
        raise SsftError(f"{folder}: {INDEX_INFO} names a {info.get('kind')} index, and {name} is missing; run "
                        f"ssft-encode again to rebuild the index")
    if file_sha256(folder / name) != info["sha256"]:
        raise SsftError(f"{folder / name}: does not match the checksum in {INDEX_INFO} (replaced or changed "
                        f"since ssft-encode built it); run ssft-encode again to rebuild the index")
    if plaid:
        return _checked(folder, manifest, info, PlaidIndex.load(folder / PLAID_FILE, mmap=mmap), dataset)
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
    if _is_ivf(index):  # indexes built before nprobe was calibrated recorded 16
        faiss.extract_index_ivf(index).nprobe = int(info.get("nprobe") or 16)
    hnsw = getattr(faiss.downcast_index(index), "hnsw", None)
    if hnsw is not None:
        hnsw.efSearch = int(info.get("ef_search", 128))
    return _checked(folder, manifest, info, index, dataset)


def _checked(folder: Path, manifest: dict, info: dict, index: Any, dataset: IRDataset | None) -> SavedIndex:
    """The loaded ``index`` once its index.json matches the encoding (fingerprints, rows) and ``dataset``."""
    name = INDEX_FILE if info.get("kind") != PLAID else "index.plaid"
    if "units" not in info:
        raise SsftError(f"{folder / INDEX_INFO}: written by an earlier ssft-encode (it records too little of the "
                        f"encoding it was built from); encode the corpus again into a new folder")
    # index.faiss + index.json copied from another encoding's folder match each other, not this folder's shards
    difference = encoding_difference(folder, manifest, info)
    if difference is not None:
        raise SsftError(f"{folder}: {name} and {INDEX_INFO} were built from another encoding than "
                        f"encode.json's ({difference}); run ssft-encode again to rebuild the index")
    if index.ntotal != index_rows(folder, manifest):
        raise SsftError(f"{folder}: {name} does not match encode.json (re-run ssft-encode to rebuild it)")
    if dataset is not None:  # the rows name units of the corpus indexed: another corpus's ids would be wrong or gone
        difference = corpus_difference(manifest, dataset)
        if difference is not None:
            raise SsftError(f"--index-dir {folder}: the corpus changed since the index was built (--data "
                            f"{dataset.path}: {difference}); rebuild the index with ssft-encode")
    return SavedIndex(index, manifest["unit_ids"], info, manifest)


__all__ = ["CORPUS_FILE", "INDEX_FILE", "INDEX_INFO", "KINDS", "PLAID", "SavedIndex", "build_saved_index", "check_index",
           "encoding_difference", "encoding_fingerprints", "factory_string", "index_rows", "load_index"]

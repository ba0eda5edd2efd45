"""A compressed ColBERT index that prunes like PLAID (Santhanam et al. 2022, "PLAID: An Efficient Engine for Late
Interaction Retrieval"), over ColBERTv2's residual compression (Santhanam et al. 2022, "ColBERTv2", §3.3).

Every document token is stored as the id of its nearest k-means centroid (inner product) and its residual (token −
centroid) quantised to ``bits`` bits per dimension: each dimension's residual values are cut at their
``2^bits``-quantiles, and a code decompresses to the mean residual of its bucket in that dimension. At 128 dimensions
and 2 bits that is 32 bytes of residual + 2 bytes of centroid id (4 above 65,536 centroids) per token, against 256
bytes for the float16 token itself. Inverted lists map each centroid to the documents that hold a token of it.

A query (its token matrix ``Q``) is answered in four stages, each over fewer documents:

1. candidates: every query token's ``ncells`` best centroids (``Q`` · centroids); the documents of their lists;
2. centroid interaction, pruned: each candidate's approximate MaxSim from its tokens' centroid scores alone, tokens
   whose centroid no query token scores ``threshold`` or more left out; the best ``ndocs`` kept;
3. centroid interaction over all their tokens; the best ``ndocs // 4`` kept (``rescore``);
4. those documents' residuals decompressed (centroid + bucket values) and scored by exact MaxSim on the
   decompressed vectors; the top ``depth``.

Only stage 4 reads residuals: the documents it decompresses (``rescore``) are the documents scored in full, the rest
are scored from 2-byte centroid ids. The scores returned are MaxSim on the decompressed vectors (the stored tokens up
to their quantisation), not on the float16 shards.

``PlaidIndex.build`` trains the centroids (``faiss.Kmeans``, seeded) and the buckets on an even sample of the
tokens; ``save`` writes one file (``index.plaid``: a JSON header, then each array raw and aligned) that ``load``
memory-maps. ``ssft.eval.index.build_saved_index(folder, "plaid")`` builds it from ssft-encode's shards and records
it in index.json with the encoding's fingerprints, like a faiss index; ``ssft.eval.colbert_index.load_late_index``
serves it.
"""
from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from ssft.core.errors import SsftError

PLAID_FILE = "index.plaid"
_MAGIC = b"SSFTPLAID1\n"
_ALIGN = 64
BITS = (1, 2, 4, 8)
DEFAULT_BITS = 2
DEFAULT_NCELLS = 4  # centroids probed per query token
DEFAULT_THRESHOLD = 0.4  # stage 2: tokens whose centroid scores below this for every query token are left out
_CHUNK = 1 << 16  # token rows compressed or decompressed at once


def _whole(name: str, value: Any, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise SsftError(f"{name}: expected a whole number >= {low}, got {value!r}")
    return int(value)


def check_plaid_options(ncentroids: int | None = None, bits: int = DEFAULT_BITS, ncells: int | None = None,
                        ndocs: int | None = None, rescore: int | None = None, threshold: float | None = None,
                        dim: int | None = None) -> None:
    """One-line refusals naming the option, before anything is trained or searched."""
    if ncentroids is not None:
        _whole("ncentroids", ncentroids)
    if isinstance(bits, bool) or bits not in BITS:
        raise SsftError(f"bits: expected one of {', '.join(map(str, BITS))} bits per dimension, got {bits!r}")
    if dim is not None and (dim * bits) % 8:
        raise SsftError(f"bits: {bits} bits x {dim} dimensions is not a whole number of bytes; use bits 8 or a "
                        f"token dimension that is a multiple of {8 // math.gcd(8, bits)}")
    for name, value in (("ncells", ncells), ("ndocs", ndocs), ("rescore", rescore)):
        if value is not None:
            _whole(name, value)
    if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, (int, float, np.floating))
                                  or not math.isfinite(threshold)):
        raise SsftError(f"threshold: expected a number (a centroid score, e.g. 0.4), got {threshold!r}")


def default_centroids(tokens: int) -> int:
    """ColBERTv2's rule: the power of two at most 16 x sqrt(tokens), at most one centroid per 8 tokens."""
    k = 2 ** int(math.floor(math.log2(max(1.0, 16 * math.sqrt(max(tokens, 1))))))
    return max(1, min(k, tokens // 8 or 1))


def default_ndocs(depth: int) -> int:
    """Documents kept by stage 2 (PLAID: 256 for 10 hits, 1,024 for 100, 4,096 for 1,000; here 256, 1,000 and
    10,000); stage 4 decompresses a quarter of them."""
    return max(256, 10 * int(depth))


def _pack(codes: np.ndarray, bits: int) -> np.ndarray:
    """(rows, dim) codes < 2^bits as (rows, dim * bits / 8) bytes, the first dimension in the lowest bits."""
    per = 8 // bits
    codes = codes.astype(np.uint8).reshape(len(codes), -1, per)
    out = np.zeros(codes.shape[:2], dtype=np.uint8)
    for j in range(per):
        out |= codes[:, :, j] << np.uint8(j * bits)
    return out


def _unpack(packed: np.ndarray, bits: int) -> np.ndarray:
    per = 8 // bits
    mask = np.uint8((1 << bits) - 1)
    return np.stack([(packed >> np.uint8(j * bits)) & mask for j in range(per)], axis=2).reshape(len(packed), -1)


def _segment_max_sum(sims: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Per segment of columns of ``sims`` (query tokens, rows) -- consecutive runs of ``lengths`` -- the sum over
    query tokens of the max over the segment's columns; 0 for an empty segment."""
    scores = np.zeros(len(lengths), dtype=np.float32)
    has = lengths > 0
    if sims.shape[1] == 0 or not has.any():
        return scores
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])[has]
    scores[has] = np.maximum.reduceat(sims, starts, axis=1).sum(axis=0)
    return scores


def _rows_of(offsets: np.ndarray, units: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(token rows of ``units`` in order, tokens per unit)."""
    starts, lengths = offsets[units], offsets[units + 1] - offsets[units]
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64), lengths
    shift = np.repeat(starts - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
    return shift + np.arange(total, dtype=np.int64), lengths


def _top(units: np.ndarray, scores: np.ndarray, keep: int) -> tuple[np.ndarray, np.ndarray]:
    """The best ``keep`` (units, scores), best first; ties by unit row."""
    if len(units) > keep:  # a partial sort first: only the boundary's ties need the full order
        cut = np.partition(scores, len(scores) - keep)[len(scores) - keep]
        inside = scores >= cut
        units, scores = units[inside], scores[inside]
    order = np.lexsort((units, -scores))[:keep]
    return units[order], scores[order]


class PlaidIndex:
    """Centroids, bucket values, every token's centroid id and packed residual, each unit's token rows and the
    inverted lists centroid -> units (module docstring)."""

    ARRAYS = ("centroids", "cutoffs", "weights", "codes", "residuals", "offsets", "ivf", "ivf_offsets")

    def __init__(self, arrays: dict[str, np.ndarray], meta: dict[str, Any]):
        self.arrays = arrays
        self.meta = dict(meta)
        self.bits = int(meta["bits"])
        self.centroids = np.ascontiguousarray(arrays["centroids"], dtype=np.float32)  # small: float32 in memory
        self.weights = np.asarray(arrays["weights"], dtype=np.float32)  # (dim, 2^bits)
        self.codes, self.residuals = arrays["codes"], arrays["residuals"]
        self.offsets = np.asarray(arrays["offsets"], dtype=np.int64)
        self.ivf, self.ivf_offsets = arrays["ivf"], np.asarray(arrays["ivf_offsets"], dtype=np.int64)
        self.normalize = bool(meta.get("normalize"))
        # decompression table: byte position p, byte value v -> the (8 / bits) residual values it codes
        per = 8 // self.bits
        values = _unpack(np.arange(256, dtype=np.uint8)[:, None], self.bits)  # (256, per)
        dims = np.arange(self.dim).reshape(-1, per)  # (dim / per, per)
        table = np.ascontiguousarray(self.weights[dims[:, None, :], values[None, :, :]], dtype=np.float32)
        self._table = table.reshape(-1).view(np.dtype((np.void, 4 * per)))  # one item per (byte position, value)
        self._positions = (np.arange(self.dim // per, dtype=np.int32) * 256)[None, :]  # byte p's rows in the table
        # each unit's distinct centroids (the inverted lists transposed): stages 2-3 score these, not every token
        sizes = np.diff(self.ivf_offsets)
        order = np.argsort(np.asarray(self.ivf), kind="stable")
        self.unit_cells = np.repeat(np.arange(len(sizes), dtype=self.codes.dtype), sizes)[order]
        self.unit_cell_offsets = np.concatenate([[0], np.cumsum(np.bincount(np.asarray(self.ivf),
                                                                            minlength=self.units))]).astype(np.int64)
        self.last_stats: list[dict[str, int]] = []  # per query of the last search: documents at each stage

    # ------------------------------------------------------------------ sizes
    @property
    def dim(self) -> int:
        return int(self.centroids.shape[1])

    @property
    def ntotal(self) -> int:
        """Tokens stored."""
        return int(self.offsets[-1])

    @property
    def units(self) -> int:
        return len(self.offsets) - 1

    def nbytes(self) -> dict[str, int]:
        """Bytes of each stored array (as saved: centroids float16)."""
        return {name: int(np.asarray(self.arrays[name]).nbytes) for name in self.ARRAYS}

    def bytes_per_token(self) -> float:
        """Every stored array's bytes (centroids, buckets, ids, residuals, unit offsets, inverted lists) per token."""
        return sum(self.nbytes().values()) / max(1, self.ntotal)

    # ------------------------------------------------------------------ build
    @classmethod
    def build(cls, parts: list[np.ndarray], lengths: np.ndarray, ncentroids: int | None = None,
              bits: int = DEFAULT_BITS, seed: int = 0, max_train: int = 262_144, niter: int = 10,
              settings: dict[str, Any] | None = None) -> PlaidIndex:
        """Train on an even sample of at most ``max_train`` of the token rows of ``parts`` (float16 or float32, in
        unit order; ``lengths`` tokens per unit) and compress every token. ``seed``: k-means's (same seed, same
        tokens: the same index)."""
        import faiss  # noqa: PLC0415 -- optional and heavy: only full retrieval needs it

        lengths = np.asarray(lengths, dtype=np.int64)
        rows = int(sum(p.shape[0] for p in parts))
        if rows != int(lengths.sum()):
            raise SsftError(f"the token parts hold {rows} vectors, the units {int(lengths.sum())}")
        if rows == 0:
            raise SsftError("a PLAID index needs token vectors; the corpus has none")
        dim = int(parts[0].shape[1])
        check_plaid_options(ncentroids=ncentroids, bits=bits, dim=dim)
        _whole("max_train", max_train)
        k = int(ncentroids or default_centroids(rows))
        if k > rows:
            raise SsftError(f"ncentroids: {k} centroids need at least as many token vectors, the corpus has {rows}")
        step = max(1, -(-rows // max(max_train, k)))
        sample = np.ascontiguousarray(np.concatenate([p[(-start) % step :: step] for p, start in
                                                      zip(parts, np.cumsum([0] + [p.shape[0] for p in parts])[:-1])]),
                                      dtype=np.float32)
        kmeans = faiss.Kmeans(dim, k, niter=niter, seed=int(seed), spherical=False, verbose=False,
                              max_points_per_centroid=max(1, -(-len(sample) // k)))
        kmeans.train(sample)
        centroids = kmeans.centroids.astype(np.float16)  # stored as float16: assignment uses what is stored
        quantizer = faiss.IndexFlatIP(dim)
        quantizer.add(centroids.astype(np.float32))
        norms = np.linalg.norm(sample, axis=1)
        normalize = bool(np.all(np.abs(norms - 1) < 1e-2))  # unit tokens: decompressed ones are renormalised
        # buckets per dimension: the 2^bits-quantiles of the sample's residuals cut, each bucket's mean decodes
        _, assigned = quantizer.search(sample, 1)
        residual = sample - centroids.astype(np.float32)[assigned[:, 0]]
        levels = 1 << bits
        cutoffs = np.quantile(residual, np.arange(1, levels) / levels, axis=0).T.astype(np.float32)  # (dim, L-1)
        weights = np.quantile(residual, (np.arange(levels) + 0.5) / levels, axis=0).T.astype(np.float32)  # (dim, L)
        id_type = np.uint16 if k <= 1 << 16 else np.int32
        codes = np.empty(rows, dtype=id_type)
        residuals = np.empty((rows, dim * bits // 8), dtype=np.uint8)
        start = 0
        for part in parts:
            for lo in range(0, part.shape[0], _CHUNK):
                x = np.ascontiguousarray(part[lo : lo + _CHUNK], dtype=np.float32)
                _, ids = quantizer.search(x, 1)
                ids = ids[:, 0]
                r = x - centroids.astype(np.float32)[ids]
                buckets = np.zeros(r.shape, dtype=np.uint8)
                for j in range(levels - 1):
                    buckets += r > cutoffs[:, j]
                codes[start : start + len(x)] = ids
                residuals[start : start + len(x)] = _pack(buckets, bits)
                start += len(x)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        units = len(lengths)
        token_unit = np.repeat(np.arange(units, dtype=np.int64), lengths)
        pairs = np.unique(codes.astype(np.int64) * units + token_unit)  # (centroid, unit), sorted by centroid
        ivf = (pairs % units).astype(np.int32)
        ivf_offsets = np.concatenate([[0], np.cumsum(np.bincount(pairs // units, minlength=k))]).astype(np.int64)
        meta = {"bits": bits, "ncentroids": k, "dim": dim, "tokens": rows, "units": units, "seed": int(seed),
                "normalize": normalize, "train_tokens": len(sample), "niter": niter, **(settings or {})}
        arrays = {"centroids": centroids, "cutoffs": cutoffs, "weights": weights, "codes": codes,
                  "residuals": residuals, "offsets": offsets, "ivf": ivf, "ivf_offsets": ivf_offsets}
        return cls(arrays, meta)

    # ------------------------------------------------------------------ save / load
    def save(self, path: Path) -> str:
        """Write the index to ``path`` (one file); returns its SHA-256."""
        header: dict[str, Any] = {"meta": self.meta, "arrays": {}}
        offset = 0
        for name in self.ARRAYS:
            array = np.ascontiguousarray(self.arrays[name])
            offset = -(-offset // _ALIGN) * _ALIGN
            header["arrays"][name] = {"dtype": array.dtype.str, "shape": list(array.shape), "offset": offset}
            offset += array.nbytes
        text = json.dumps(header, sort_keys=True).encode("utf-8")
        start = -(-(len(_MAGIC) + 8 + len(text)) // _ALIGN) * _ALIGN  # the arrays begin aligned after the header
        digest = hashlib.sha256()
        with open(path, "wb") as handle:
            def write(data: bytes) -> None:
                handle.write(data)
                digest.update(data)

            write(_MAGIC + len(text).to_bytes(8, "little") + text)
            position = len(_MAGIC) + 8 + len(text)
            for name in self.ARRAYS:
                spec = header["arrays"][name]
                pad = start + spec["offset"] - position
                write(b"\0" * pad)
                data = np.ascontiguousarray(self.arrays[name])
                for lo in range(0, max(1, len(data)), 1 << 20):
                    write(data[lo : lo + (1 << 20)].tobytes())
                position = start + spec["offset"] + data.nbytes
        return digest.hexdigest()

    @classmethod
    def load(cls, path: Path, mmap: bool = True) -> PlaidIndex:
        """The index ``save`` wrote, its arrays memory-mapped (``mmap``) or read whole."""
        path = Path(path)
        with open(path, "rb") as handle:
            magic = handle.read(len(_MAGIC))
            if magic != _MAGIC:
                raise SsftError(f"{path}: not a PLAID index written by ssft")
            size = int.from_bytes(handle.read(8), "little")
            try:
                header = json.loads(handle.read(size).decode("utf-8"))
            except (json.JSONDecodeError, UnicodeDecodeError):
                raise SsftError(f"{path}: its header is not readable") from None
        start = -(-(len(_MAGIC) + 8 + size) // _ALIGN) * _ALIGN
        arrays = {}
        for name in cls.ARRAYS:
            spec = header["arrays"][name]
            shape, dtype = tuple(spec["shape"]), np.dtype(spec["dtype"])
            if int(np.prod(shape)) == 0:
                arrays[name] = np.zeros(shape, dtype=dtype)
            elif mmap:
                arrays[name] = np.memmap(path, dtype=dtype, mode="r", offset=start + spec["offset"], shape=shape)
            else:
                arrays[name] = np.fromfile(path, dtype=dtype, count=int(np.prod(shape)),
                                           offset=start + spec["offset"]).reshape(shape)
        return cls(arrays, header["meta"])

    # ------------------------------------------------------------------ scoring
    def decompress(self, rows: np.ndarray) -> np.ndarray:
        """The decompressed token vectors of ``rows`` (float32, (len(rows), dim)): centroid + bucket values."""
        rows = np.asarray(rows, dtype=np.int64)
        packed = np.asarray(self.residuals[rows]).astype(np.int32) + self._positions
        out = np.take(self._table, packed).view(np.float32).reshape(len(rows), self.dim)
        out += np.take(self.centroids, np.asarray(self.codes[rows], dtype=np.int64), axis=0)
        if self.normalize:
            out /= np.maximum(np.sqrt(np.einsum("ij,ij->i", out, out)), 1e-12)[:, None]
        return out

    def maxsim(self, query: np.ndarray, units: np.ndarray) -> np.ndarray:
        """MaxSim of ``query`` against each of ``units`` on the decompressed vectors (0 for a unit without tokens)."""
        units = np.asarray(units, dtype=np.int64)
        query = np.ascontiguousarray(query, dtype=np.float32)
        scores = np.zeros(len(units), dtype=np.float32)
        start = 0
        while start < len(units):  # about _CHUNK * 4 token rows at once
            lengths = self.offsets[units[start:] + 1] - self.offsets[units[start:]]
            stop = start + max(1, int(np.searchsorted(np.cumsum(lengths), 4 * _CHUNK, side="right")))
            rows, lengths = _rows_of(self.offsets, units[start:stop])
            scores[start:stop] = _segment_max_sum(query @ self.decompress(rows).T, lengths)
            start = stop
        return scores

    def centroid_scores(self, cell_scores: np.ndarray, units: np.ndarray, keep: np.ndarray | None = None) -> np.ndarray:
        """PLAID's centroid interaction: each unit's MaxSim with every token replaced by its centroid (``cell_scores``:
        (query tokens, centroids)); with ``keep`` (a mask over centroids) only the tokens of kept centroids count."""
        rows, lengths = _rows_of(self.unit_cell_offsets, units)
        cells = np.asarray(self.unit_cells[rows], dtype=np.int64)
        if keep is not None:
            kept = keep[cells]
            cells = cells[kept]
            ends = np.cumsum(lengths)
            lengths = np.diff(np.concatenate([[0], np.cumsum(kept)])[np.concatenate([[0], ends])])
        return _segment_max_sum(np.take(cell_scores, cells, axis=1), lengths)

    def search_one(self, query: np.ndarray, depth: int, ncells: int = DEFAULT_NCELLS, ndocs: int | None = None,
                   rescore: int | None = None, threshold: float | None = DEFAULT_THRESHOLD
                   ) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
        """(units, scores, documents per stage) of one query's top ``depth`` (module docstring's stages)."""
        query = np.ascontiguousarray(query, dtype=np.float32)
        ndocs = int(ndocs or default_ndocs(depth))
        rescore = int(rescore or max(depth, ndocs // 4))
        k = len(self.centroids)
        cell_scores = query @ self.centroids.T  # (query tokens, centroids)
        cells = min(int(ncells), k)
        probed = (np.unique(np.argpartition(-cell_scores, cells - 1, axis=1)[:, :cells]) if cells < k
                  else np.arange(k))
        lists = [self.ivf[self.ivf_offsets[c] : self.ivf_offsets[c + 1]] for c in probed]
        candidates = np.unique(np.concatenate(lists)).astype(np.int64) if lists else np.zeros(0, dtype=np.int64)
        stats = {"candidates": len(candidates)}
        # stage 2: centroid interaction over the centroids some query token scores at least `threshold` on
        if len(candidates) > ndocs:
            keep = cell_scores.max(axis=0) >= threshold if threshold is not None else None
            candidates, _ = _top(candidates, self.centroid_scores(cell_scores, candidates, keep), ndocs)
        stats["stage2"] = len(candidates)
        # stage 3: centroid interaction over every centroid of the survivors
        if len(candidates) > rescore:
            candidates, _ = _top(candidates, self.centroid_scores(cell_scores, candidates), rescore)
        stats["rescored"] = len(candidates)
        # stage 4: residuals decompressed, exact MaxSim on them
        units, exact = _top(candidates, self.maxsim(query, candidates), depth)
        return units, exact, stats

    def search(self, queries: list[np.ndarray], depth: int, ncells: int | None = None, ndocs: int | None = None,
               rescore: int | None = None, threshold: float | None = None) -> list[list[tuple[int, float]]]:
        """For each query's token matrix, the top-``depth`` (unit row, MaxSim on the decompressed vectors); the
        options default to index.json's, then to the module's defaults."""
        check_plaid_options(ncells=ncells, ndocs=ndocs, rescore=rescore, threshold=threshold)
        _whole("depth", depth)
        ncells = int(ncells or self.meta.get("ncells") or DEFAULT_NCELLS)
        ndocs = ndocs or self.meta.get("ndocs")
        rescore = rescore or self.meta.get("rescore")
        threshold = threshold if threshold is not None else self.meta.get("threshold", DEFAULT_THRESHOLD)
        out, self.last_stats = [], []
        for query in queries:
            units, scores, stats = self.search_one(query, min(int(depth), self.units), ncells, ndocs, rescore,
                                                   threshold)
            out.append([(int(u), float(s)) for u, s in zip(units, scores)])
            self.last_stats.append(stats)
        return out


__all__ = ["BITS", "DEFAULT_BITS", "DEFAULT_NCELLS", "DEFAULT_THRESHOLD", "PLAID_FILE", "PlaidIndex",
           "check_plaid_options", "default_centroids", "default_ndocs"]

"""k-NN estimate of the KL divergence between two samples (Pérez-Cruz 2008), DAFT's alignment measure (000 Eq. 9)."""
from __future__ import annotations

import math

import numpy as np


def _kth_distances(queries: np.ndarray, points: np.ndarray, k: int, exclude_self: bool) -> np.ndarray:
    """Euclidean distance from each query to its k-th nearest neighbour in ``points`` (faiss, exact);
    ``exclude_self``: queries are ``points`` and each one's own row does not count."""
    import faiss  # noqa: PLC0415 -- optional and heavy: only the DAFT alignment measure needs it

    index = faiss.IndexFlatL2(points.shape[1])
    index.add(points)
    want = k + 1 if exclude_self else k
    squared, rows = index.search(queries, want)
    if not exclude_self:
        return np.sqrt(np.maximum(squared[:, k - 1], 0.0))
    out = np.empty(len(queries), dtype=np.float64)
    for i in range(len(queries)):
        keep = [s for s, r in zip(squared[i], rows[i]) if r != i][:k]  # drop the point itself (once)
        out[i] = math.sqrt(max(keep[k - 1], 0.0))
    return out


def knn_kl_divergence(x: np.ndarray, x_prime: np.ndarray, k: int = 1, eps: float = 1e-12) -> float:
    r"""Estimate KL(P‖Q) from x ~ P (n, a) and x' ~ Q (m, a), Eq. 9 of 000:

    .. math:: \mathrm{KL}_k(P\|Q) = -\frac{a}{n}\sum_{i=1}^n \log\frac{r_k(x_i)}{s_k(x_i)} + \log\frac{m}{n-1}

    r_k(x_i): distance to the k-th nearest neighbour of x_i in x without x_i; s_k(x_i): in x'. Distances are
    clamped at ``eps`` (duplicate points, e.g. collapsed representations, would give log 0). DAFT takes
    x = document-encoder and x' = query-encoder representations of the same validation queries, k = 1.
    """
    x = np.ascontiguousarray(np.asarray(x, dtype=np.float32))
    x_prime = np.ascontiguousarray(np.asarray(x_prime, dtype=np.float32))
    if x.ndim != 2 or x_prime.ndim != 2 or x.shape[1] != x_prime.shape[1]:
        raise ValueError(f"expected two (n, a) arrays of the same width, got {x.shape} and {x_prime.shape}")
    n, a = x.shape
    m = x_prime.shape[0]
    if n <= k or m < k:
        raise ValueError(f"need more than k={k} points in x and at least k in x' (got {n} and {m})")
    r = np.maximum(_kth_distances(x, x, k, exclude_self=True), eps)
    s = np.maximum(_kth_distances(x, x_prime, k, exclude_self=False), eps)
    return float(-a / n * np.sum(np.log(r / s)) + math.log(m / (n - 1)))


def gaussian_kl(mu_p: np.ndarray, cov_p: np.ndarray, mu_q: np.ndarray, cov_q: np.ndarray) -> float:
    """Closed-form KL(N(mu_p, cov_p) ‖ N(mu_q, cov_q)) (for testing the estimator)."""
    a = len(mu_p)
    inv_q = np.linalg.inv(cov_q)
    diff = mu_q - mu_p
    return float(0.5 * (np.trace(inv_q @ cov_p) + diff @ inv_q @ diff - a
                        + np.log(np.linalg.det(cov_q) / np.linalg.det(cov_p))))


__all__ = ["gaussian_kl", "knn_kl_divergence"]

"""PCA plots of query vs document representations (000 Fig. 1, 3, 5): are the two towers' outputs in the
same region of the space (aligned) or in two clusters (mismatch), or shrunk to a point (collapse)?"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch


def encode_sample(model, queries: list[str], documents: list[str], batch_size: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """(query vectors from the query tower, document vectors from the document tower)."""
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            q = [model.encode_queries(queries[i : i + batch_size]).vectors.float().cpu()
                 for i in range(0, len(queries), batch_size)]
            d = [model.encode_documents(documents[i : i + batch_size]).vectors.float().cpu()
                 for i in range(0, len(documents), batch_size)]
    finally:
        model.train(was_training)
    return torch.cat(q).numpy(), torch.cat(d).numpy()


def pca_2d(*arrays: np.ndarray) -> list[np.ndarray]:
    """Project the arrays onto the first two principal components of their union (fitted jointly, so the
    relative position of queries and documents shows)."""
    joint = np.concatenate(arrays).astype(np.float64)
    mean = joint.mean(0, keepdims=True)
    _, _, vt = np.linalg.svd(joint - mean, full_matrices=False)
    components = vt[:2].T if vt.shape[0] >= 2 else np.pad(vt.T, ((0, 0), (0, 2 - vt.shape[0])))
    return [(a - mean) @ components for a in arrays]


def plot_pca(panels: list[tuple[str, np.ndarray, np.ndarray]], path: str | Path) -> Path:
    """One scatter panel per (title, query vectors, document vectors), written as PNG."""
    import matplotlib  # noqa: PLC0415  (heavy optional library, loaded on first use)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415  (heavy optional library, loaded on first use)

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 4.0), squeeze=False)
    for ax, (title, q, d) in zip(axes[0], panels):
        q2, d2 = pca_2d(q, d)
        ax.scatter(d2[:, 0], d2[:, 1], s=6, alpha=0.5, label="documents", color="tab:orange")
        ax.scatter(q2[:, 0], q2[:, 1], s=6, alpha=0.5, label="queries", color="tab:blue")
        ax.set_title(title, fontsize=10)
        ax.set_xticks([])
        ax.set_yticks([])
    axes[0][0].legend(loc="best", fontsize=8)
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    tmp.replace(path)
    return path


__all__ = ["encode_sample", "pca_2d", "plot_pca"]

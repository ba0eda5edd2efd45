"""BM25 first stage (bm25s): retrieval runs for evaluation and hard negatives for training."""
from __future__ import annotations

import logging

from ssft.data.beir import IRDataset
from ssft.data.trec import Run

logger = logging.getLogger(__name__)


class BM25:
    """bm25s index over title + text with English stopwords (and optional Snowball stemming)."""

    def __init__(self, dataset: IRDataset, stem: bool = False, k1: float = 1.5, b: float = 0.75):
        import bm25s  # noqa: PLC0415  (heavy optional library, loaded on first use)

        logging.getLogger("bm25s").setLevel(logging.WARNING)  # bm25s logs every index build at DEBUG
        self._bm25s = bm25s
        self.stemmer = None
        if stem:
            import Stemmer  # noqa: PLC0415  (heavy optional library, loaded on first use)

            self.stemmer = Stemmer.Stemmer("english")
        self.doc_ids = list(dataset.corpus)
        texts = [dataset.corpus[d].full_text for d in self.doc_ids]
        tokens = bm25s.tokenize(texts, stopwords="en", stemmer=self.stemmer, show_progress=False)
        self.retriever = bm25s.BM25(k1=k1, b=b)
        self.retriever.index(tokens, show_progress=False)

    def search(self, queries: dict[str, str], k: int) -> Run:
        qids = list(queries)
        if not qids:
            return {}
        k = min(k, len(self.doc_ids))
        tokens = self._bm25s.tokenize([queries[q] for q in qids], stopwords="en", stemmer=self.stemmer, show_progress=False)
        docs, scores = self.retriever.retrieve(tokens, k=k, show_progress=False, n_threads=1)
        run: Run = {}
        for row, qid in enumerate(qids):
            # bm25s returns rows padded with score-0 hits when fewer docs match; keep only real matches
            run[qid] = {self.doc_ids[int(i)]: float(s) for i, s in zip(docs[row], scores[row]) if s > 0}
        empty = sum(1 for q in run if not run[q])
        if empty:
            logger.warning("BM25: %d queries matched no document", empty)
        return run

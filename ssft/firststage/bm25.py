"""BM25 first stage (bm25s): retrieval runs for evaluation and hard negatives for training.

The index is saved with bm25s's own ``save`` under ``$SSFT_CACHE/bm25/<key>`` (``ssft.core.paths.cache_home``),
the key a hash of the corpus (ids and texts, in order) and of the tokenisation and scoring settings (stopwords,
stemming, k1, b, the bm25s version), and loaded from there by the next run over the same corpus instead of
indexing it again. Retrieval runs on every core (bm25s ``n_threads``). Progress (``ssft.core.progress``): bm25s's own
bars on a terminal; otherwise a line when indexing starts and, for searches, a progress line at most every
``SSFT_PROGRESS_INTERVAL`` seconds (queries searched in chunks); ``SSFT_PROGRESS=0`` silences both."""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path

from ssft.core import progress
from ssft.core.paths import cache_home
from ssft.data.beir import IRDataset
from ssft.data.trec import Run

logger = logging.getLogger(__name__)

STOPWORDS = "en"
INDEX_FORMAT = 1  # bump when what the cached folder holds changes


def index_key(doc_ids: list[str], texts: list[str], stem: bool, k1: float, b: float, version: str) -> str:
    """The cache key of an index: the corpus content and every setting the index depends on."""
    digest = hashlib.sha256(json.dumps({"format": INDEX_FORMAT, "bm25s": version, "stopwords": STOPWORDS,
                                        "stemmer": "snowball-english" if stem else None, "k1": k1, "b": b},
                                       sort_keys=True).encode())
    for doc_id, text in zip(doc_ids, texts):
        digest.update(doc_id.encode())
        digest.update(b"\0")
        digest.update(text.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:32]


class BM25:
    """bm25s index over title + text with English stopwords (and optional Snowball stemming), cached on disk.

    ``cache``: load / save the index under ``$SSFT_CACHE/bm25`` (default); ``indexed`` says whether this object
    built the index (False: loaded from the cache). ``save``: write a new index to the cache now; False leaves
    that to ``save()``, which a pipeline calls once it has succeeded (a refused or failed run writes nothing, not
    even the cache). ``n_threads``: retrieval threads (-1: every core)."""

    SEARCH_CHUNK = 2048  # queries per bm25s call when progress goes to a log (a line may follow each chunk)

    def __init__(self, dataset: IRDataset, stem: bool = False, k1: float = 1.5, b: float = 0.75, cache: bool = True,
                 n_threads: int = -1, show_progress: bool | None = None, save: bool = True):
        import bm25s  # noqa: PLC0415  (heavy optional library, loaded on first use)

        logging.getLogger("bm25s").setLevel(logging.WARNING)  # bm25s logs every index build at DEBUG
        self._bm25s = bm25s
        self.n_threads = n_threads
        self.show_progress = progress.enabled() and progress.on_terminal() if show_progress is None else show_progress
        self.stemmer = None
        if stem:
            import Stemmer  # noqa: PLC0415  (heavy optional library, loaded on first use)

            self.stemmer = Stemmer.Stemmer("english")
        self.doc_ids = list(dataset.corpus)
        texts = [dataset.corpus[d].full_text for d in self.doc_ids]
        self.folder = cache_home() / "bm25" / index_key(self.doc_ids, texts, stem, k1, b, bm25s.__version__) if cache else None
        self.retriever = self._load()
        self.indexed = self.retriever is None
        if self.retriever is None:
            if progress.enabled() and not self.show_progress:  # bm25s reports nothing a log file could show
                logger.info("BM25: indexing %s documents", f"{len(texts):,}")
            tokens = bm25s.tokenize(texts, stopwords=STOPWORDS, stemmer=self.stemmer, show_progress=self.show_progress)
            self.retriever = bm25s.BM25(k1=k1, b=b)
            self.retriever.index(tokens, show_progress=self.show_progress)
            if save:
                self.save()

    def _load(self):
        if self.folder is None or not (self.folder / "params.index.json").is_file():
            return None
        try:
            retriever = self._bm25s.BM25.load(str(self.folder), show_progress=False)
        except (OSError, ValueError, KeyError, json.JSONDecodeError) as err:  # a damaged cache entry: index again
            logger.warning("BM25 index cache %s unreadable (%s): indexing again", self.folder, err)
            return None
        logger.info("BM25 index loaded from %s", self.folder)
        return retriever

    def save(self) -> None:
        """Cache an index this object built (once): into a temporary folder, then renamed, so that a killed run
        leaves no half-written index behind."""
        if self.folder is None or not self.indexed or self.folder.exists():
            return
        try:
            self.folder.parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=f".{self.folder.name}.", dir=self.folder.parent))
            try:
                self.retriever.save(str(tmp), show_progress=False)
                os.replace(tmp, self.folder)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)  # left only when another run saved the same index first
        except OSError as err:  # a read-only cache only costs the next run its indexing
            logger.warning("BM25 index not cached in %s: %s", self.folder, err)

    def tokenize_queries(self, texts: list[str]):
        return self._bm25s.tokenize(texts, stopwords=STOPWORDS, stemmer=self.stemmer, show_progress=False)

    def search(self, queries: dict[str, str], k: int) -> Run:
        qids = list(queries)
        if not qids:
            return {}
        k = min(k, len(self.doc_ids))
        run: Run = {}
        # a terminal: bm25s's bar over all queries at once; else chunks, each a step of a progress line
        chunk = len(qids) if self.show_progress else self.SEARCH_CHUNK
        with progress.Progress("BM25 search", len(qids), "queries", show=not self.show_progress) as bar:
            for start in range(0, len(qids), chunk):
                part = qids[start : start + chunk]
                tokens = self.tokenize_queries([queries[q] for q in part])
                docs, scores = self.retriever.retrieve(tokens, k=k, show_progress=self.show_progress,
                                                       n_threads=self.n_threads)
                for row, qid in enumerate(part):
                    # bm25s returns rows padded with score-0 hits when fewer docs match; keep only real matches
                    run[qid] = {self.doc_ids[int(i)]: float(s) for i, s in zip(docs[row], scores[row]) if s > 0}
                bar.update(len(part))
        empty = sum(1 for q in run if not run[q])
        if empty:
            logger.warning("BM25: %d queries matched no document", empty)
        return run

    def scores_of(self, query: str, doc_ids: list[str]) -> list[float]:
        """BM25 scores of ``query`` against the given documents (0 where no query term occurs)."""
        tokens = self._bm25s.tokenize([query], stopwords=STOPWORDS, stemmer=self.stemmer, show_progress=False,
                                      return_ids=False)[0]
        if not tokens:
            return [0.0] * len(doc_ids)
        vocab = self.retriever.vocab_dict
        known = [t for t in tokens if t in vocab]
        if not known:
            return [0.0] * len(doc_ids)
        all_scores = self.retriever.get_scores(known)
        position = self.__dict__.setdefault("_position", {d: i for i, d in enumerate(self.doc_ids)})
        return [float(all_scores[position[d]]) for d in doc_ids]

"""Bi-encoders: encode queries, encode documents, score. TwinBERT and ColBERT differ only in how token
states become representations (``represent``), how queries/documents are tokenised, and ``score``.

Training and reranking go through the same ``RankerCollator`` / ``PairDataset`` / ``RankingTrainer`` as the
cross-encoder: ``tokenize(queries, documents)`` tokenises each *distinct* query and document of a batch once
and returns index tensors mapping every pair to its rows, and ``forward`` returns one score per pair.
``score_run`` reranks a first stage encoding every distinct document once, whatever the number of queries
that retrieved it.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from ssft.core.progress import Progress, track
from ssft.data.trec import top_k
from ssft.models.base import Pretrained, Ranker, _check_batch_size, _texts
from ssft.models.embedding_cache import cached_documents
from ssft.models.encoded import Encoded


def row_keys(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> list[bytes]:
    """One key per row: the attended token ids (identical text and tokenizer → identical key)."""
    ids = input_ids.detach().cpu()
    mask = attention_mask.detach().cpu().bool()
    return [ids[i][mask[i]].numpy().tobytes() for i in range(ids.shape[0])]


def unique_with_index(texts: list[str]) -> tuple[list[str], torch.Tensor]:
    """Distinct texts in first-seen order, and for each input its row among them."""
    rows: dict[str, int] = {}
    index = [rows.setdefault(t, len(rows)) for t in texts]
    return list(rows), torch.tensor(index, dtype=torch.long)


def group_items(q_index: torch.Tensor, d_index: torch.Tensor, group: int) -> tuple[torch.Tensor, torch.Tensor]:
    """For a training batch of (query, [positive, negatives...]) groups (``BiEncoder.tokenize``'s indices):
    each item's row among the distinct queries and its positive's column among the distinct documents."""
    return q_index.view(-1, group)[:, 0], d_index.view(-1, group)[:, 0]


def query_positives(item_q: torch.Tensor, item_pos: torch.Tensor, documents: int) -> torch.Tensor:
    """(items, documents) mask, True at every positive of each item's query in the batch (its own included)."""
    same_query = item_q.unsqueeze(1) == item_q.unsqueeze(0)  # (items, items)
    mask = torch.zeros(len(item_q), documents, dtype=torch.bool, device=item_pos.device)
    rows, cols = same_query.nonzero(as_tuple=True)
    mask[rows, item_pos[cols]] = True
    return mask


class BiEncoder(Ranker):
    """Subclasses define ``tokenize_queries``, ``tokenize_documents``, ``represent`` and ``score``."""

    bi_encoder = True  # capability flag (Ranker): queries and documents encoded separately, by towers
    cache_document_embeddings = False  # True: a frozen model's document representations are cached on disk

    # ------------------------------------------------------------ the encode path
    def prompted(self, texts: list[str], tower: str) -> list[str]:
        """``texts`` with the tower's prompt in front: a SentenceTransformer checkpoint's query / document prompt
        (e.g. ``"query: "``), kept in the spec (``query_prompt`` / ``document_prompt``); none by default."""
        prompt = self.spec.get(f"{tower}_prompt")
        return [prompt + t for t in texts] if prompt else list(texts)

    def tokenize_queries(self, texts: list[str]) -> dict[str, torch.Tensor]:
        return self._tokenize_single(self.prompted(texts, "query"), self.query_max_length)

    def tokenize_documents(self, texts: list[str]) -> dict[str, torch.Tensor]:
        return self._tokenize_single(self.prompted(texts, "document"), self.max_length)

    def _tokenize_single(self, texts: list[str], max_length: int) -> dict[str, torch.Tensor]:
        out = self.token_cache().single(texts, max_length)  # = tokenizer(texts, truncation, padding); each text once
        return {"input_ids": out["input_ids"], "attention_mask": out["attention_mask"]}

    def represent(self, hidden: torch.Tensor, input_ids: torch.Tensor, attention_mask: torch.Tensor, tower: str) -> Encoded:
        raise NotImplementedError

    # ------------------------------------------------------------ a SentenceTransformer checkpoint's modules
    @classmethod
    def spec_from_pretrained(cls, spec, config, pretrained: Pretrained) -> None:
        """A SentenceTransformer checkpoint's query / document prompts are kept (``prompted``); its Pooling module is
        checked against ``model.pooling`` (a difference is reported: the recipe's value is used)."""
        modules = pretrained.modules
        if modules is None or pretrained.kind != "sentence-transformers":
            return
        prompts = modules.prompts
        for tower, keys in (("query", ("query",)), ("document", ("document", "passage", "corpus"))):
            prompt = next((prompts[k] for k in keys if prompts.get(k)), None)
            if prompt:
                spec[f"{tower}_prompt"] = prompt
        if prompts and not modules.include_prompt:
            pretrained.notes.append("its Pooling leaves the prompt tokens out (include_prompt false); ssft pools them")
        pooling = getattr(config, "pooling", "mean")  # an architecture without the key (colbert) pools nothing itself
        if modules.pooling is not None and modules.pooling != pooling:
            pretrained.notes.append(f"its Pooling module pools '{modules.pooling}', model.pooling is '{pooling}' (used)")
        if modules.other:
            pretrained.notes.append(f"its modules {', '.join(modules.other)} are not used")

    def score(self, q: Encoded, d: Encoded) -> torch.Tensor:
        """Scores of aligned pairs: q[i] with d[i], shape (n,)."""
        raise NotImplementedError

    def score_matrix(self, q: Encoded, d: Encoded) -> torch.Tensor:
        """Scores of every query against every document, shape (len(q), len(d)); subclasses with a cheaper
        form (a matrix product) override it."""
        rows = torch.arange(len(q), device=q.vectors.device).repeat_interleave(len(d))
        cols = torch.arange(len(d), device=d.vectors.device).repeat(len(q))
        return self.score(q.select(rows), d.select(cols)).view(len(q), len(d))

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, tower: str) -> Encoded:
        """The one encode path: backbone (with the tower's modules) → representation."""
        hidden = self.backbone(input_ids, attention_mask, tower=tower)
        return self.represent(hidden, input_ids, attention_mask, tower)

    def encode_queries(self, texts: list[str]) -> Encoded:
        batch = self._to_device(self.tokenize_queries(texts))
        return self.encode(batch["input_ids"], batch["attention_mask"], "query")

    def encode_documents(self, texts: list[str]) -> Encoded:
        batch = self._to_device(self.tokenize_documents(texts))
        return self.encode(batch["input_ids"], batch["attention_mask"], "document")

    def _to_device(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        device = next(self.parameters()).device
        return {k: v.to(device) for k, v in batch.items()}

    # ------------------------------------------------------------ the public inference interface (``ssft.load``)
    def encode_query(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray | list[np.ndarray]:
        """Query embeddings as numpy (what ``encode_queries`` computes, without gradient, at the ranker's precision,
        in batches): a float32 array (texts, dim), or for a multi-vector model one (tokens, dim) array per text.

        >>> model.encode_query(["vitamin d"]).shape
        (1, 384)"""
        return self._encode_numpy(_texts(texts, "encode_query"), "query", batch_size)

    def encode_document(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray | list[np.ndarray]:
        """Document embeddings as numpy: as ``encode_query``, with the document tower."""
        return self._encode_numpy(_texts(texts, "encode_document"), "document", batch_size)

    def _encode_numpy(self, texts: list[str], tower: str, batch_size: int) -> np.ndarray | list[np.ndarray]:
        parts = self._encoded(texts, tower, batch_size)
        if parts and parts[0].mask is not None:  # multi-vector: each text's used tokens
            return [it.vectors[0][it.mask[0].bool()].float().cpu().numpy() for it in parts]
        if not parts:
            return np.zeros((0, 0), dtype=np.float32)
        return torch.cat([it.vectors for it in parts]).float().cpu().numpy()

    def _encoded(self, texts: list[str], tower: str, batch_size: int) -> list[Encoded]:
        """One ``Encoded`` per text, in input order; batches of similar lengths (longest first)."""
        _check_batch_size(batch_size)
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        out: list[Encoded | None] = [None] * len(texts)
        with self._serving() as model:
            encode = model.encode_queries if tower == "query" else model.encode_documents
            for start in range(0, len(order), batch_size):
                rows = order[start : start + batch_size]
                for i, it in zip(rows, encode([texts[i] for i in rows]).split()):
                    out[i] = it
        return out  # type: ignore[return-value]

    def _rank_scores(self, query: str, documents: list[str], batch_size: int) -> np.ndarray:
        """The query encoded once, each document once, scored as ``predict`` scores the pairs."""
        if not documents:
            return np.zeros(0, dtype=np.float32)
        q = self._encoded([query], "query", 1)[0]
        d = self._encoded(documents, "document", batch_size)
        with self._serving() as model:
            scores = []
            for start in range(0, len(d), batch_size):
                chunk = Encoded.stack(d[start : start + batch_size])
                q_rows = q.select(torch.zeros(len(chunk), dtype=torch.long, device=q.vectors.device))
                scores.append(model.score(q_rows, chunk).float().cpu())
        return torch.cat(scores).numpy()

    # ------------------------------------------------------------ the ranker interface
    def tokenize(self, queries: list[str], documents: list[str]) -> dict[str, torch.Tensor]:
        """Pairs to model inputs. Each distinct query / document is tokenised once; ``q_index`` / ``d_index``
        (one entry per pair, first so that the Trainer reads the pair count as the batch size) map pairs to rows."""
        unique_q, q_index = unique_with_index(queries)
        unique_d, d_index = unique_with_index(documents)
        q = self.tokenize_queries(unique_q)
        d = self.tokenize_documents(unique_d)
        return {"q_index": q_index, "d_index": d_index,
                "q_input_ids": q["input_ids"], "q_attention_mask": q["attention_mask"],
                "d_input_ids": d["input_ids"], "d_attention_mask": d["attention_mask"]}

    def forward(self, q_input_ids: torch.Tensor, q_attention_mask: torch.Tensor, d_input_ids: torch.Tensor,
                d_attention_mask: torch.Tensor, q_index: torch.Tensor | None = None, d_index: torch.Tensor | None = None,
                all_pairs: bool = False) -> torch.Tensor:
        """One score per pair. Without indices, row i of the queries pairs with row i of the documents.
        ``all_pairs``: instead, the (distinct queries, distinct documents) matrix of every query's score against
        every document of the batch (what in-loop distillation compares with its teacher's)."""
        q = self.encode(q_input_ids, q_attention_mask, "query")
        d = self.encode(d_input_ids, d_attention_mask, "document")
        if all_pairs:
            return self.score_matrix(q, d)
        if q_index is not None:
            q = q.select(q_index)
        if d_index is not None:
            d = d.select(d_index)
        return self.score(q, d)


def score_run(model: BiEncoder, run: dict[str, dict[str, float]], dataset, depth: int, batch_size: int = 64,
              queries: dict[str, str] | None = None) -> dict[str, dict[str, float]]:
    """Rerank each query's top-``depth`` candidates of ``run``: every distinct document is encoded once (and
    every query once), then each query is scored against its candidates' stored representations."""
    queries = queries if queries is not None else dataset.queries
    run = top_k({q: docs for q, docs in run.items() if q in queries}, depth)
    candidates = {q: [d for d in docs if d in dataset.corpus] for q, docs in run.items()}
    return score_candidates(model, candidates, queries, dataset, batch_size)


def score_candidates(model: BiEncoder, candidates: dict[str, list[str]], queries: dict[str, str], dataset,
                     batch_size: int = 64) -> dict[str, dict[str, float]]:
    """Scores of every (query, document) in ``candidates`` (query id → document ids of ``dataset``). Each
    distinct document is encoded once — or read from the on-disk cache when the model is frozen and caches
    (``ssft.models.embedding_cache``) — and each query once."""
    doc_ids = sorted({d for docs in candidates.values() for d in docs})
    # documents sorted by length so each batch pads little
    doc_ids.sort(key=lambda d: len(dataset.corpus[d].full_text))
    texts = [dataset.corpus[d].full_text for d in doc_ids]
    qids = sorted(q for q, docs in candidates.items() if docs)
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            def encode_all() -> list[Encoded]:
                reps: list[Encoded] = []
                with Progress("encoding documents", len(doc_ids), "documents") as bar:
                    for start in range(0, len(doc_ids), batch_size):
                        reps.extend(model.encode_documents(texts[start : start + batch_size]).split())
                        bar.update(min(batch_size, len(doc_ids) - start))
                return reps

            doc_reps = dict(zip(doc_ids, cached_documents(model, doc_ids, texts, encode_all)))
            out: dict[str, dict[str, float]] = {}
            for start in track(range(0, len(qids), batch_size), "scoring queries", unit="batches"):
                chunk = qids[start : start + batch_size]
                for qid, q in zip(chunk, model.encode_queries([queries[q] for q in chunk]).split()):
                    docs = candidates[qid]
                    d = Encoded.stack([doc_reps[x] for x in docs])
                    scores = model.score(q.select(torch.zeros(len(docs), dtype=torch.long, device=q.vectors.device)), d)
                    out[qid] = {x: float(s) for x, s in zip(docs, scores.float().cpu())}
    finally:
        model.train(was_training)
    return out


def score_pairs_once(model: BiEncoder, pairs, batch_size: int = 64) -> np.ndarray:
    """Scores of a ``PairDataset`` in ``pairs.pairs`` order, through ``score_candidates`` (each distinct
    document encoded once), as ``Trainer.predict(pairs).predictions`` would return them."""
    candidates: dict[str, list[str]] = {}
    for qid, did in dict.fromkeys(pairs.pairs):
        candidates.setdefault(qid, []).append(did)
    scored = score_candidates(model, candidates, pairs.queries, pairs.dataset, batch_size)
    return np.array([scored[q][d] for q, d in pairs.pairs], dtype=np.float32)


__all__ = ["BiEncoder", "Encoded", "group_items", "query_positives", "row_keys", "score_candidates", "score_pairs_once",
           "score_run", "unique_with_index"]

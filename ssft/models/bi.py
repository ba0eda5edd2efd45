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
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ssft.config.registry import ADAPTERS
from ssft.core.arguments import text
from ssft.core.errors import SsftError
from ssft.core.progress import Progress, track
from ssft.data.trec import top_k
from ssft.models.base import Pretrained, Ranker, _check_batch_size, _device_of, _flag, _texts
from ssft.models.batching import (
    as_float_tensor,
    check_flag,
    inference_progress,
    length_batches,
    single_lengths,
    token_lengths,
)
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

    def encode_tokens(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, tower: str) -> Encoded:
        """The one encode path of token ids: backbone (with the tower's modules) → representation (``encode`` is
        sentence-transformers' call on texts).

        Args:
            input_ids: (n, length) token ids, as ``tokenize_queries`` / ``tokenize_documents`` build them.
            attention_mask: (n, length), 1 at attended positions.
            tower: ``query`` or ``document``.

        Returns:
            The texts' ``Encoded`` representations (with gradient where the weights train).
        """
        hidden = self.backbone(input_ids, attention_mask, tower=tower)
        return self.represent(hidden, input_ids, attention_mask, tower)

    def encode_queries(self, texts: list[str]) -> Encoded:
        batch = self._to_device(self.tokenize_queries(texts))
        return self.encode_tokens(batch["input_ids"], batch["attention_mask"], "query")

    def encode_documents(self, texts: list[str]) -> Encoded:
        batch = self._to_device(self.tokenize_documents(texts))
        return self.encode_tokens(batch["input_ids"], batch["attention_mask"], "document")

    def _to_device(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        device = next(self.parameters()).device
        return {k: v.to(device) for k, v in batch.items()}

    # ------------------------------------------------------------ the public inference interface (``ssft.load``)
    def encode_query(self, texts: str | Sequence[str], batch_size: int = 32, show_progress_bar: bool | None = None,
                     convert_to_numpy: bool = True, convert_to_tensor: bool = False,
                     normalize_embeddings: bool = False) -> np.ndarray | torch.Tensor | list:
        """Query embeddings in sentence-transformers' shape (``encode_query``): what ``encode_queries`` computes,
        without gradient, at the ranker's precision, in batches of about one token count, returned in input order.

        Args:
            texts: one text or a list of texts.
            batch_size: texts per forward pass.
            show_progress_bar: None: progress past 256 texts (a bar on a terminal or in a notebook, else
                ``ssft.progress`` log lines); True: a bar; False: none.
            convert_to_numpy: float32 numpy (the default); False: a list of float32 tensors.
            convert_to_tensor: one float32 tensor (texts, dim) on the model's device (overrides
                ``convert_to_numpy``); a multi-vector model returns a list of tensors (texts differ in tokens).
            normalize_embeddings: L2-normalise each vector (a multi-vector model's: each token vector).

        Returns:
            An array (texts, dim), or (dim,) for one text; a multi-vector model (ColBERT): one (tokens, dim) array
            per text (its scored tokens), one array for one text.

        Examples:
            >>> model.encode_query(["vitamin d"]).shape
            (1, 384)
            >>> model.encode_query("vitamin d").shape
            (384,)
        """
        return self._encode_public(texts, "query", "encode_query", batch_size, show_progress_bar, convert_to_numpy,
                                   convert_to_tensor, normalize_embeddings)

    def encode_document(self, texts: str | Sequence[str], batch_size: int = 32, show_progress_bar: bool | None = None,
                        convert_to_numpy: bool = True, convert_to_tensor: bool = False,
                        normalize_embeddings: bool = False) -> np.ndarray | torch.Tensor | list:
        """Document embeddings in sentence-transformers' shape (``encode_document``): as ``encode_query``, with the
        document tower.

        Args:
            texts: one text or a list of texts.
            batch_size: texts per forward pass.
            show_progress_bar: as ``encode_query``'s.
            convert_to_numpy: float32 numpy (the default); False: a list of float32 tensors.
            convert_to_tensor: one float32 tensor (overrides ``convert_to_numpy``).
            normalize_embeddings: L2-normalise each vector.

        Returns:
            As ``encode_query``.
        """
        return self._encode_public(texts, "document", "encode_document", batch_size, show_progress_bar,
                                   convert_to_numpy, convert_to_tensor, normalize_embeddings)

    def encode(self, texts: str | Sequence[str], batch_size: int = 32, show_progress_bar: bool | None = None,
               convert_to_numpy: bool = True, convert_to_tensor: bool = False,
               normalize_embeddings: bool = False) -> np.ndarray | torch.Tensor | list:
        """Embeddings of a symmetric model (sentence-transformers' ``encode``): one tower for queries and documents
        (a Siamese twin or dense model without semi-Siamese adapters, a separate document tower or different query
        and document prompts). It is ``encode_document`` (texts truncated at ``max_length``, as a sentence-transformers
        Router's default route); an asymmetric model refuses it, pointing to ``encode_query`` / ``encode_document``.
        The torch-level encode path of token ids is ``encode_tokens``.

        Args:
            texts: one text or a list of texts.
            batch_size: texts per forward pass.
            show_progress_bar: as ``encode_query``'s.
            convert_to_numpy: float32 numpy (the default); False: a list of float32 tensors.
            convert_to_tensor: one float32 tensor (overrides ``convert_to_numpy``).
            normalize_embeddings: L2-normalise each vector.

        Returns:
            As ``encode_query``.

        Examples:
            >>> model.encode(["bone health", "a recipe"]).shape
            (2, 384)
        """
        why = self.asymmetry()
        if why is not None:
            raise SsftError(f"encode: this '{self.architecture}' model encodes queries and documents differently "
                            f"({why}); use encode_query or encode_document")
        return self._encode_public(texts, "document", "encode", batch_size, show_progress_bar, convert_to_numpy,
                                   convert_to_tensor, normalize_embeddings)

    def asymmetry(self) -> str | None:
        """Why queries and documents go through different encoders (``encode`` refuses then).

        Returns:
            The reason in words (semi-Siamese towers, different prompts; subclasses add theirs), or None for a
            symmetric model.
        """
        method = self.backbone.method
        towers = method in ADAPTERS and ADAPTERS.get(method).needs_towers
        if towers or self.backbone.tower_switch is not None or hasattr(self.backbone.hidden_prefix, "tower_mlps"):
            return f"semi-Siamese towers, method {method}"
        if self.spec.get("query_prompt") != self.spec.get("document_prompt"):
            return (f"query prompt {self.spec.get('query_prompt')!r}, document prompt "
                    f"{self.spec.get('document_prompt')!r}")
        return None

    def similarity(self, embeddings1: Any, embeddings2: Any) -> torch.Tensor:
        """Scores of every embedding of ``embeddings1`` (queries) against every one of ``embeddings2``
        (documents), in sentence-transformers' shape (``similarity``), by the model's own scoring function: what
        ``rank`` and ``predict`` score. A dense model scores ``score_scale`` x the dot product of its vectors, i.e.
        20 x cosine by default where sentence-transformers returns the cosine (divide by ``model.score_scale`` for
        it); TwinBERT its scorer (combiner, cosine or dot); ColBERT MaxSim over each text's token vectors.

        Args:
            embeddings1: ``encode_query``'s output: an array or tensor (n, dim) or (dim,), a list of vectors; for
                ColBERT one (tokens, dim) matrix per text (a list), or one matrix.
            embeddings2: ``encode_document``'s output, likewise.

        Returns:
            A (len(embeddings1), len(embeddings2)) float32 tensor.

        Examples:
            >>> model.similarity(model.encode_query(["vitamin d"]), model.encode_document(["bones", "a recipe"]))
            tensor([[11.2, 1.3]])
        """
        with self._serving() as model:
            device = _device_of(model)
            q = self._as_encoded(embeddings1, "similarity: embeddings1", device)
            d = self._as_encoded(embeddings2, "similarity: embeddings2", device)
            if len(q) == 0 or len(d) == 0:
                return torch.zeros(len(q), len(d), device=device)
            width = q.vectors.shape[-1], d.vectors.shape[-1]
            if width[0] != width[1]:
                raise SsftError(f"similarity: embeddings1 has {width[0]} dimensions, embeddings2 {width[1]}")
            try:
                return model.score_matrix(q, d).float()
            except RuntimeError as err:  # e.g. vectors of another model's size
                raise SsftError(f"similarity: these embeddings do not fit this model: {str(err).splitlines()[0]}") from None

    def _as_encoded(self, values: Any, what: str, device: torch.device) -> Encoded:
        """User embeddings (``encode_query`` / ``encode_document``'s outputs) as an ``Encoded`` on ``device``."""
        if getattr(self, "multi_vector", False):
            if isinstance(values, (np.ndarray, torch.Tensor)) and values.ndim == 2:
                values = [values]
            if not isinstance(values, (list, tuple)):
                raise SsftError(f"{what}: expected one (tokens, dim) matrix per text (a list), got {type(values).__name__}")
            items = [as_float_tensor(v, f"{what}: item {i}") for i, v in enumerate(values)]
            if any(m.ndim != 2 or m.shape[0] == 0 for m in items):
                raise SsftError(f"{what}: expected one (tokens, dim) matrix per text")
            if not items:
                return Encoded(torch.zeros(0, 1, 1, device=device), torch.zeros(0, 1, device=device))
            return Encoded.stack([Encoded(m[None].to(device), torch.ones(1, m.shape[0], device=device)) for m in items])
        vectors = as_float_tensor(values, what)
        if vectors.ndim == 1:
            vectors = vectors[None] if vectors.numel() else vectors.reshape(0, 0)
        if vectors.ndim != 2:
            raise SsftError(f"{what}: expected vectors of shape (n, dim) or (dim,), got shape {tuple(vectors.shape)}")
        return Encoded(vectors.to(device))

    def _encode_public(self, texts: Any, tower: str, what: str, batch_size: int, show_progress_bar: Any,
                       convert_to_numpy: Any, convert_to_tensor: Any, normalize_embeddings: Any
                       ) -> np.ndarray | torch.Tensor | list:
        """``encode_query`` / ``encode_document`` / ``encode``: checks, the encoding, sentence-transformers' shapes."""
        single = isinstance(texts, str)
        items = [text(texts, f"{what}: texts")] if single else _texts(texts, what)
        _check_batch_size(batch_size)
        show = check_flag(show_progress_bar, f"{what}: show_progress_bar")
        to_numpy, to_tensor = _flag(convert_to_numpy, f"{what}: convert_to_numpy"), _flag(convert_to_tensor,
                                                                                           f"{what}: convert_to_tensor")
        normalize = _flag(normalize_embeddings, f"{what}: normalize_embeddings")
        stage = "encoding" if what == "encode" else "encoding queries" if tower == "query" else "encoding documents"
        with inference_progress(stage, len(items), "texts", show) as bar:
            parts = self._encoded(items, tower, batch_size, bar)
        if getattr(self, "multi_vector", False):  # each text's scored tokens
            matrices = [it.vectors[0][it.mask[0].bool()].float() for it in parts]
            if normalize:
                matrices = [F.normalize(m, p=2, dim=-1) for m in matrices]
            out = [m.cpu().numpy() for m in matrices] if to_numpy and not to_tensor else matrices
            return out[0] if single else out
        if not parts:
            vectors = torch.zeros(0, 0)
        else:
            vectors = torch.cat([it.vectors for it in parts]).float()
        if normalize:
            vectors = F.normalize(vectors, p=2, dim=1)
        out = vectors if to_tensor else vectors.cpu().numpy() if to_numpy else list(vectors)
        return out[0] if single else out

    def _encoded(self, texts: list[str], tower: str, batch_size: int, bar=None) -> list[Encoded]:
        """One ``Encoded`` per text, in input order; batches longest first by exact token count
        (``ssft.models.batching``), ``bar`` advanced by each batch."""
        _check_batch_size(batch_size)
        lengths = token_lengths(self, texts, tower)
        out: list[Encoded | None] = [None] * len(texts)
        with self._serving() as model:
            encode = model.encode_queries if tower == "query" else model.encode_documents
            for rows in length_batches(lengths, batch_size):
                for i, it in zip(rows, encode([texts[i] for i in rows]).split()):
                    out[i] = it
                if bar is not None:
                    bar.update(len(rows))
        return out  # type: ignore[return-value]

    def token_lengths(self, texts: Sequence[str], tower: str) -> list[int]:
        """Tokens of each text's row as ``tokenize_queries`` / ``tokenize_documents`` builds it (padding excluded):
        the order batches are cut in (``ssft.models.batching``). Texts the token cache has not seen are tokenised
        once, and their ids kept for the batches.

        Args:
            texts: the texts.
            tower: ``query`` or ``document``.

        Returns:
            One count per text.
        """
        length = self.query_max_length if tower == "query" else self.max_length
        return single_lengths(self.tokenizer, self.token_cache(), self.prompted(list(texts), tower), length)

    def _pair_scores(self, pairs: list[tuple[str, str]], batch_size: int, show: bool | None) -> torch.Tensor:
        """Each distinct query and document of ``pairs`` encoded once (batches by token count), then each pair
        scored: what ``forward`` scores, without encoding a text twice."""
        if not pairs:
            return torch.zeros(0, dtype=torch.float32)
        queries, q_index = unique_with_index([q for q, _ in pairs])
        documents, d_index = unique_with_index([d for _, d in pairs])
        with inference_progress("scoring pairs", len(queries) + len(documents), "texts", show) as bar:
            q = self._encoded(queries, "query", batch_size, bar)
            d = self._encoded(documents, "document", batch_size, bar)
        scores = []
        with self._serving() as model:
            for start in range(0, len(pairs), batch_size):
                rows = range(start, min(start + batch_size, len(pairs)))
                qs = Encoded.stack([q[int(q_index[i])] for i in rows])
                ds = Encoded.stack([d[int(d_index[i])] for i in rows])
                scores.append(model.score(qs, ds).float())
        return torch.cat(scores)

    def _rank_scores(self, query: str, documents: list[str], batch_size: int, show: bool | None = None) -> torch.Tensor:
        """The query encoded once, each document once, scored as ``predict`` scores the pairs."""
        if not documents:
            return torch.zeros(0, dtype=torch.float32)
        with inference_progress("ranking", len(documents), "documents", show) as bar:
            q = self._encoded([query], "query", 1)[0]
            d = self._encoded(documents, "document", batch_size, bar)
        with self._serving() as model:
            scores = []
            for start in range(0, len(d), batch_size):
                chunk = Encoded.stack(d[start : start + batch_size])
                q_rows = q.select(torch.zeros(len(chunk), dtype=torch.long, device=q.vectors.device))
                scores.append(model.score(q_rows, chunk).float())
        return torch.cat(scores)

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
        q = self.encode_tokens(q_input_ids, q_attention_mask, "query")
        d = self.encode_tokens(d_input_ids, d_attention_mask, "document")
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
    distinct document is encoded once, in batches by token count — or read from the on-disk cache when the model is
    frozen and caches (``ssft.models.embedding_cache``) — and each query once.

    Args:
        model: the bi-encoder.
        candidates: query id → the document ids to score.
        queries: query id → text.
        dataset: the ``IRDataset`` holding the documents.
        batch_size: texts encoded at once.

    Returns:
        Query id → {document id: score}.
    """
    doc_ids = sorted({d for docs in candidates.values() for d in docs})
    # the on-disk cache's key keeps this order (by characters, then id); the batches are cut by token count
    doc_ids.sort(key=lambda d: len(dataset.corpus[d].full_text))
    texts = [dataset.corpus[d].full_text for d in doc_ids]
    qids = sorted(q for q, docs in candidates.items() if docs)
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            def encode_all() -> list[Encoded]:
                reps: list[Encoded | None] = [None] * len(texts)
                with Progress("encoding documents", len(doc_ids), "documents") as bar:
                    for rows in length_batches(token_lengths(model, texts, "document"), batch_size):
                        for i, it in zip(rows, model.encode_documents([texts[i] for i in rows]).split()):
                            reps[i] = it
                        bar.update(len(rows))
                return reps  # type: ignore[return-value]

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

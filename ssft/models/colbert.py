"""ColBERT (Khattab & Zaharia 2020) as used in 001: late interaction over token embeddings.

- queries: ``[CLS] [Q] tokens [SEP]`` padded with [MASK] to ``query_max_length`` (query augmentation,
  ``query_expansion``); the [MASK] positions take part in scoring, and the encoder attends to them only with
  ``attend_expansion`` (default: not, as Stanford's ColBERT and PyLate; a ColBERT checkpoint keeps its own settings).
  Without the expansion a query is its own tokens, cut at ``query_max_length``.
- documents: ``[CLS] [D] tokens [SEP]`` (``max_length``), punctuation tokens left out of scoring.
- every token state is projected to ``colbert_dim`` (128, no bias) and L2-normalised. The projection starts where
  the pretrained token geometry is kept (``projection_start``): a square one (``colbert_dim`` = the hidden size) as
  the identity, a narrower one (``pca``, default) as the top ``colbert_dim`` principal directions of the training
  corpus's token states (``fit_start``: the states of up to 256 documents; at full rank it is a rotation and scores
  exactly as the identity). ``random``: PyTorch's default initialisation, as the original ColBERT's new layer. With
  all-MiniLM-L6-v2 at 128 dimensions, the MaxSim scores of 15 NFCorpus dev queries over 80 documents keep a mean
  Spearman correlation of 0.90 with the full-width identity's (the PCA start), against 0.47 for PyTorch's default.
- score = sum over query tokens of the max over document tokens of the dot product (MaxSim).

The [Q] / [D] markers are the vocabulary's ``[unused0]`` / ``[unused1]`` (as the original ColBERT); ``markers: false``
leaves them out (``[CLS] tokens [SEP]`` on both sides). A checkpoint that never saw them (all-MiniLM-L6-v2) holds
untrained embeddings there, which LoRA never trains: from all-MiniLM-L6-v2 the start ranks NFCorpus dev higher
without them.

Built from a ColBERT checkpoint (Stanford's ``HF_ColBERT`` or a sentence-transformers ``MultiVectorEncoder`` / PyLate
folder, ``ssft.models.interop.checkpoint``), the model keeps the checkpoint's projection and how it tokenises and
scores, in its spec: markers (``query_marker`` / ``document_marker``, e.g. PyLate's ``[Q]`` / ``[D]``), whether the
encoder attends to the [MASK] expansion (``attend_expansion``: Stanford's default does not; the [MASK] positions are
scored either way) and the punctuation skiplist (``mask_punctuation``). ``query_max_length`` stays the recipe's; a
checkpoint expanding queries to another length is reported.
"""
from __future__ import annotations

import string
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ssft.adapters.backbone import Backbone
from ssft.config.model import ArchitectureConfig
from ssft.config.parse import Problem
from ssft.core.errors import SsftError
from ssft.models.base import Pretrained
from ssft.models.batching import cached_lengths
from ssft.models.bi import BiEncoder, Encoded

PROJECTION_STARTS = ("pca", "random")
PCA_DOCUMENTS = 256  # documents whose token states fit a narrower projection's start (fit_start)
QUERY_MARKER = "[unused0]"
DOCUMENT_MARKER = "[unused1]"


@dataclass
class ColbertConfig(ArchitectureConfig):
    """ColBERT's model key (see the module docstring)."""

    colbert_dim: int = 128  # token embedding size after the projection
    projection_start: str = "pca"  # pca (a narrower projection from the corpus's token states) | random
    # whether the encoder attends to the queries' [MASK] expansion; null: a ColBERT checkpoint's own setting, else
    # false (Stanford's and PyLate's default; from all-MiniLM-L6-v2 the start ranks NFCorpus dev higher without it)
    attend_expansion: bool | None = None
    # pad queries with [MASK] to query_max_length (ColBERT's query augmentation); null: as a ColBERT checkpoint does,
    # else true; false: a query is its own tokens
    query_expansion: bool | None = None
    # the [Q] / [D] marker tokens after [CLS]; null: as a ColBERT checkpoint does, else true
    markers: bool | None = None

    def problem(self) -> Problem:
        if self.projection_start not in PROJECTION_STARTS:
            return "projection_start", f"expected one of {', '.join(PROJECTION_STARTS)}, got '{self.projection_start}'"
        return ("colbert_dim", "must be >= 1") if self.colbert_dim < 1 else None


def maxsim(q: torch.Tensor, q_mask: torch.Tensor, d: torch.Tensor, d_mask: torch.Tensor) -> torch.Tensor:
    """Late-interaction score of aligned pairs: q (n, Lq, dim), d (n, Ld, dim), masks (n, L) → (n,)."""
    sim = torch.einsum("nqk,ndk->nqd", q, d)
    sim = sim.masked_fill(~d_mask.bool().unsqueeze(1), float("-inf"))
    best = sim.max(dim=-1).values
    best = torch.where(torch.isfinite(best), best, torch.zeros_like(best))  # a document with nothing to match
    return (best * q_mask.to(best.dtype)).sum(-1)


class ColBert(BiEncoder):
    architecture = "colbert"
    Config = ColbertConfig
    # a spec without a key was saved before it existed: a projection started at random; queries marked, [MASK]-expanded
    # and the expansion attended, as every ssft ColBERT then was
    legacy_spec = {"projection_start": "random", "attend_expansion": True, "query_expansion": True, "markers": True}
    cache_document_embeddings = True  # per-token embeddings of a frozen model are kept on disk (embedding_cache)
    multi_vector = True  # a text is its token vectors: ssft-encode writes them, ssft-retrieve searches them by MaxSim

    def __init__(self, backbone: Backbone, tokenizer, spec):
        super().__init__(backbone, tokenizer, spec)
        self.dim = self.arch_config.colbert_dim
        self.projection = nn.Linear(backbone.config.hidden_size, self.dim, bias=False)
        # fit_start fits a narrower projection to the corpus; one from a ColBERT checkpoint (adopt_pretrained) stays
        self.projection_fitted = self.dim == backbone.config.hidden_size or self.arch_config.projection_start == "random"
        if self.dim == backbone.config.hidden_size:
            with torch.no_grad():
                self.projection.weight.copy_(torch.eye(self.dim))
        vocab = tokenizer.get_vocab()
        marked = self.arch_config.markers is not False  # null: true
        # a marker None: that tower has none (markers: false, or a checkpoint that marks one tower only)
        self.query_marker = spec.get("query_marker", QUERY_MARKER) if marked else None
        self.document_marker = spec.get("document_marker", DOCUMENT_MARKER) if marked else None
        self.attend_expansion = bool(self.arch_config.attend_expansion)  # null (not resolved from a checkpoint): false
        self.query_expansion = self.arch_config.query_expansion is not False  # null: true
        self.mask_punctuation = bool(spec.get("mask_punctuation", True))
        missing = [t for t in (self.query_marker, self.document_marker) if t is not None and t not in vocab]
        if missing or tokenizer.mask_token_id is None:
            raise SsftError(f"colbert: the tokenizer of {spec.get('base_model')} lacks {', '.join(missing) or '[MASK]'} "
                            "(needed for the [Q]/[D] markers and query augmentation; BERT-style vocabularies have them)")
        self.query_marker_id = vocab[self.query_marker] if self.query_marker is not None else None
        self.document_marker_id = vocab[self.document_marker] if self.document_marker is not None else None
        punctuation = set()
        for symbol in string.punctuation if self.mask_punctuation else ():
            ids = tokenizer.encode(symbol, add_special_tokens=False)
            if len(ids) == 1:
                punctuation.add(ids[0])
        self.register_buffer("punctuation_ids", torch.tensor(sorted(punctuation), dtype=torch.long), persistent=False)

    @staticmethod
    def _framing(marker: int | None) -> int:
        """Tokens a row adds around its text: [CLS], the marker where there is one, [SEP]."""
        return 2 if marker is None else 3

    def _tokenize_marked(self, texts: list[str], marker: int | None, max_length: int) -> tuple[list[list[int]], int]:
        """``[CLS] marker tokens [SEP]`` (no marker where it is None), cut to ``max_length``; the longest row's width."""
        extra = self._framing(marker)
        # each distinct text tokenised once
        pieces = [ids[: max_length - extra].tolist() for ids, _ in self.token_cache().ids(texts)]
        cls, sep = self.tokenizer.cls_token_id, self.tokenizer.sep_token_id
        head = [cls] if marker is None else [cls, marker]
        return [[*head, *ids, sep] for ids in pieces], max(len(ids) + extra for ids in pieces)

    def tokenize_queries(self, texts: list[str]) -> dict[str, torch.Tensor]:
        """Queries padded with [MASK] to exactly ``query_max_length``; the [MASK] positions are attended only with
        ``attend_expansion`` (they are scored either way: ``represent``). Without ``query_expansion``: marked as
        documents are, cut at ``query_max_length``."""
        if not self.query_expansion:
            return self._padded(*self._tokenize_marked(texts, self.query_marker_id, self.query_max_length))
        length = self.query_max_length
        rows, _ = self._tokenize_marked(texts, self.query_marker_id, length)
        ids = torch.tensor([row + [self.tokenizer.mask_token_id] * (length - len(row)) for row in rows], dtype=torch.long)
        if self.attend_expansion:
            return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        lengths = torch.tensor([len(row) for row in rows])
        return {"input_ids": ids, "attention_mask": (torch.arange(length).unsqueeze(0) < lengths.unsqueeze(1)).long()}

    def token_lengths(self, texts, tower: str) -> list[int]:
        """Tokens of each text's row (``BiEncoder.token_lengths``): an expanded query is ``query_max_length`` long
        (its [MASK] expansion), any other row ``[CLS] marker tokens [SEP]`` cut at its tower's length.

        Args:
            texts: the texts.
            tower: ``query`` or ``document``.

        Returns:
            One count per text.
        """
        texts = list(texts)
        if tower == "query" and self.query_expansion:
            return [self.query_max_length] * len(texts)
        extra = self._framing(self.query_marker_id if tower == "query" else self.document_marker_id)
        keep = (self.query_max_length if tower == "query" else self.max_length) - extra
        return [min(n, keep) + extra for n in cached_lengths(self.token_cache(), texts)]

    def asymmetry(self) -> str | None:
        """``BiEncoder.asymmetry``: how ColBERT's queries and documents differ.

        Returns:
            The reason: the [Q] / [D] markers, the queries' [MASK] expansion, or punctuation scored in queries only;
            None where none of them applies.
        """
        reasons = [why for why, applies in (("[Q] / [D] markers", self.query_marker != self.document_marker),
                                            ("the queries' [MASK] expansion", self.query_expansion),
                                            ("punctuation scored in queries, not in documents", self.mask_punctuation))
                   if applies]
        return " and ".join(reasons) or None

    def tokenize_documents(self, texts: list[str]) -> dict[str, torch.Tensor]:
        return self._padded(*self._tokenize_marked(texts, self.document_marker_id, self.max_length))

    def _padded(self, rows: list[list[int]], width: int) -> dict[str, torch.Tensor]:
        pad = self.tokenizer.pad_token_id or 0
        ids = torch.tensor([row + [pad] * (width - len(row)) for row in rows], dtype=torch.long)
        lengths = torch.tensor([len(row) for row in rows])
        mask = (torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)).long()
        return {"input_ids": ids, "attention_mask": mask}

    def represent(self, hidden: torch.Tensor, input_ids: torch.Tensor, attention_mask: torch.Tensor, tower: str) -> Encoded:
        vectors = F.normalize(self.projection(hidden), p=2, dim=-1)
        mask = attention_mask.bool()
        if tower == "query" and self.query_expansion:  # every position is a token or its [MASK] expansion: all scored
            mask = torch.ones_like(mask)
        if tower == "document":
            mask = mask & ~torch.isin(input_ids, self.punctuation_ids)
        return Encoded(vectors, mask)

    # ------------------------------------------------------------ a pretrained ColBERT checkpoint
    @classmethod
    def spec_from_pretrained(cls, spec, config: ColbertConfig, pretrained: Pretrained) -> None:
        settings = pretrained.colbert
        if config.attend_expansion is None:  # null = as the checkpoint does; a plain encoder: not attended
            config.attend_expansion = settings.attend_expansion if settings is not None else False
        if config.query_expansion is None:  # null = as the checkpoint does; a plain encoder: expanded
            config.query_expansion = settings.query_length is not None if settings is not None else True
        checkpoint_marks = settings is not None and (settings.query_marker, settings.document_marker) != (None, None)
        if config.markers is None:  # null = as the checkpoint does; a plain encoder: marked
            config.markers = checkpoint_marks if settings is not None else True
        if settings is None:
            return
        if settings.projection is not None and settings.projection.shape[0] != config.colbert_dim:
            raise SsftError(f"model.colbert_dim: {config.colbert_dim}, but the projection of {pretrained.name} has "
                            f"{settings.projection.shape[0]} dimensions; set model.colbert_dim: {settings.projection.shape[0]}")
        spec.update(query_marker=settings.query_marker, document_marker=settings.document_marker,
                    mask_punctuation=settings.mask_punctuation)
        if config.markers and not checkpoint_marks:  # a recipe that asks for markers the checkpoint lacks: ssft's
            spec.update(query_marker=QUERY_MARKER, document_marker=DOCUMENT_MARKER)
        if config.markers != checkpoint_marks:
            pretrained.notes.append(f"it {'marks' if checkpoint_marks else 'does not mark'} queries and documents; "
                                    f"model.markers is {str(config.markers).lower()} (used)")
        if config.query_expansion != (settings.query_length is not None):
            pretrained.notes.append(f"it {'expands' if settings.query_length is not None else 'does not expand'} queries "
                                    f"with [MASK]; model.query_expansion is {str(config.query_expansion).lower()} (used)")
        if config.query_expansion and settings.query_length is not None and config.attend_expansion != settings.attend_expansion:
            pretrained.notes.append(f"it {'attends' if settings.attend_expansion else 'does not attend'} to the queries' "
                                    f"[MASK] expansion; model.attend_expansion is "
                                    f"{str(config.attend_expansion).lower()} (used)")
        length = spec["query_max_length"]
        if config.query_expansion and settings.query_length is not None and settings.query_length != length:
            pretrained.notes.append(f"it expands queries to {settings.query_length} tokens; model.query_max_length "
                                    f"{length} is used (set it to {settings.query_length} to score as it does)")

    def adopt_pretrained(self, pretrained: Pretrained) -> None:
        settings = pretrained.colbert
        if settings is None or settings.projection is None:
            return
        with torch.no_grad():
            self.projection.weight.copy_(settings.projection)
        self.projection_fitted = True
        pretrained.take("linear.weight")  # Stanford's (a MultiVectorEncoder's Dense is read from its own folder)

    def fit_start(self, documents: Sequence[str], seed: int = 0) -> str | None:
        """A narrower projection's start (``projection_start: pca``): the top ``colbert_dim`` right singular vectors
        of the token states (scored positions only) of up to ``PCA_DOCUMENTS`` of ``documents``, drawn with ``seed``."""
        if self.projection_fitted or not len(documents):
            return None
        positions = range(len(documents))
        if len(documents) > PCA_DOCUMENTS:  # only the sample is read: a corpus of millions stays where it is
            picked = torch.randperm(len(documents), generator=torch.Generator().manual_seed(seed))[:PCA_DOCUMENTS]
            positions = sorted(picked.tolist())
        sample = [documents[i] for i in positions]
        states = []
        was_training = self.training
        self.eval()
        try:
            with torch.inference_mode():
                for start in range(0, len(sample), 32):
                    batch = self._to_device(self.tokenize_documents(sample[start : start + 32]))
                    hidden = self.backbone(batch["input_ids"], batch["attention_mask"], tower="document")
                    mask = batch["attention_mask"].bool() & ~torch.isin(batch["input_ids"], self.punctuation_ids)
                    states.append(hidden[mask].float().cpu())
        finally:
            self.train(was_training)
        tokens = torch.cat(states)
        if min(tokens.shape) < self.dim:
            return None  # fewer token states or hidden dimensions than colbert_dim directions: the default start stays
        # centred: the directions in which the token states differ (all share a large common component)
        _, singular, directions = torch.linalg.svd(tokens - tokens.mean(0), full_matrices=False)
        with torch.no_grad():
            self.projection.weight.copy_(directions[: self.dim].to(self.projection.weight))
        self.projection_fitted = True
        kept = float((singular[: self.dim] ** 2).sum() / (singular ** 2).sum())
        return (f"ColBERT projection started as the top {self.dim} principal directions of {tokens.shape[0]:,} token "
                f"states of {len(sample)} corpus documents ({kept:.1%} of their variance)")

    def score(self, q: Encoded, d: Encoded) -> torch.Tensor:
        return maxsim(q.vectors, q.mask, d.vectors, d.mask)

    def score_matrix(self, q: Encoded, d: Encoded) -> torch.Tensor:
        """MaxSim of every query against every document, (len(q), len(d)), without repeating either."""
        sim = torch.einsum("aik,bjk->abij", q.vectors, d.vectors)
        sim = sim.masked_fill(~d.mask.bool()[None, :, None, :], float("-inf"))
        best = sim.max(dim=-1).values
        best = torch.where(torch.isfinite(best), best, torch.zeros_like(best))
        return (best * q.mask.to(best.dtype)[:, None, :]).sum(-1)

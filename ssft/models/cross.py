"""monoBERT cross-encoder (Nogueira & Cho 2019): ``[CLS] q [SEP] d [SEP]`` → a score from the [CLS] state.

``model.head`` picks how:

- ``classifier`` (default for new runs): BERT's pooler + linear, s = w · tanh(P h_[CLS] + p) + b — monoBERT's
  original layout and what transformers' ``*ForSequenceClassification`` holds (BERT's pooler; RoBERTa's and MPNet's
  ``classifier.dense`` / ``out_proj``). The pooler starts from the checkpoint's (BERT's pretrained next-sentence
  pooler, or a sequence-classification checkpoint's trained one, whose classifier is kept too: epoch 0 then scores
  as the checkpoint does); what the checkpoint lacks starts at random.
- ``cls_linear``: a linear layer on the raw [CLS] state (001 §3.1; what ssft runs saved before ``model.head``
  existed hold — their spec has no ``head`` and loads as this).
- ``dual_pooled`` (004 §4.2, App. B): no scoring layer; ``model.dual_pooling`` (``cls_sep``, Eq. 14, or
  ``segment_mean``, Eq. 15; ``ssft.models.dual_pooling``) takes proxy query and document embeddings from the last
  layer and the score is their inner product, s(q, d) = <emb_q(q,d), emb_d(q,d)>. The model carries a
  token-reconstruction head (``ssft.models.token_reconstruction``) for the reconstruction loss 004 trains it with
  (``loss.reconstruction_weight``, ``ssft.losses.token_reconstruction``); the head is not used for scoring. A run
  trained so is directly a ``distillation.teacher`` of ``teacher_kind: cross_dual_pooled``. It ranks untrained (the
  inner product of pretrained states), so epoch 0 is scored on test too; it has no sequence-classification form
  (``export_refusal``).
- ``gated_segments`` (``ssft.models.segment_gates``): the pair as ``[CLS] q [SEP] [CLS] d [SEP]``, each segment with its
  own positions, attention between the segments weighted by one gate per layer and head that starts at 0, and the
  score ``model.score_scale`` × the cosine of the two segments' mean states. Untrained, each segment sees only itself
  and the model scores every pair exactly as its checkpoint used as a dense model (mean pooling, cosine; the query cut
  at ``model.query_max_length`` tokens, the document at what is left of ``model.max_length``); training opens the
  gates where attending to the other text helps. It runs on torch only (no plain transformer forward holds the gates:
  no OpenVINO graph, no sequence-classification export).
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ssft.adapters.backbone import Backbone
from ssft.config.choices import CROSS_HEADS, DUAL_POOLINGS
from ssft.config.model import ArchitectureConfig
from ssft.config.parse import Problem
from ssft.core.errors import SsftError
from ssft.models.base import Pretrained, Ranker
from ssft.models.dual_pooling import dual_pool, segment_ids
from ssft.models.interop.checkpoint import CLS_LINEAR_EPSILON, classifier_head, exported_cls_linear
from ssft.models.segment_gates import ATTENTION, GATED_MODEL_TYPES, segment_layout, segment_means
from ssft.models.token_reconstruction import TokenReconstructionHead

DUAL_POOLED = "dual_pooled"  # model.head of 004's dual-pooled cross-encoder
GATED_SEGMENTS = "gated_segments"  # model.head of the cross-encoder that starts as its dense checkpoint
GATED_NO_GRAPH = (f"model.head: {GATED_SEGMENTS} gates attention between the query and the document, which a plain "
                  "transformer forward does not hold")  # what no OpenVINO graph or standard export can compute


@dataclass
class CrossConfig(ArchitectureConfig):
    """The cross-encoder's model keys (see the module docstring); the one place ``head`` is checked."""

    head: str = "classifier"  # classifier (BERT's pooler + linear, transformers' layout) | cls_linear | dual_pooled
    #                            | gated_segments
    dual_pooling: str = "cls_sep"  # with head dual_pooled (004 App. B): cls_sep (Eq. 14) | segment_mean (Eq. 15)
    score_scale: float = 20.0  # with head gated_segments: scores are scale * cosine of the two segments' mean states

    def problem(self) -> Problem:
        if self.head not in CROSS_HEADS:
            return "head", f"expected one of {', '.join(CROSS_HEADS)}, got '{self.head}'"
        if self.dual_pooling not in DUAL_POOLINGS:
            return "dual_pooling", f"expected {' or '.join(DUAL_POOLINGS)}, got '{self.dual_pooling}'"
        if self.dual_pooling != CrossConfig.dual_pooling and self.head != DUAL_POOLED:
            return "dual_pooling", f"only with model.head: {DUAL_POOLED}, not '{self.head}'"
        if self.score_scale != CrossConfig.score_scale and self.head != GATED_SEGMENTS:
            return "score_scale", f"only with model.head: {GATED_SEGMENTS}, not '{self.head}'"
        if self.score_scale <= 0:
            return "score_scale", "must be > 0"
        return None


class TokenStates:
    """What a forward inside ``CrossEncoder.keeping_token_states(term)`` leaves: its last-layer states and inputs, and
    ``term(hidden, input_ids, attention_mask)`` computed on them inside the forward."""

    def __init__(self, term: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor] | None = None):
        self.term = term
        self.value: torch.Tensor | None = None
        self.hidden: torch.Tensor | None = None
        self.input_ids: torch.Tensor | None = None
        self.attention_mask: torch.Tensor | None = None


class PoolerTanh(nn.Module):
    """tanh(P h + p): BERT's pooler as a module of its own (the cross-encoder's own layer), for a serving graph."""

    def __init__(self, pooler: nn.Linear):
        super().__init__()
        self.pooler = pooler

    def forward(self, cls: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.pooler(cls))


class CrossEncoder(Ranker):
    architecture = "cross"
    Config = CrossConfig
    legacy_spec = {"head": "cls_linear"}  # a spec without the key: saved before model.head existed
    ranks_untrained = False  # the ranker head starts random (001 §3.1): the untrained model cannot rank
    reconstruction_heads = (DUAL_POOLED,)  # model.head values that carry a token-reconstruction head (Ranker)
    # Ranker: int8 rounding of queries and keys reorders candidates most. Every layer's: keeping only the first and
    # the last layer's in float reranked 1.31x as fast as sentence-transformers' int8 instead of 1.21x, but moved
    # SciFact by 0.006 (BENCHMARKS.md § int8_cross_distilled)
    int8_float_attention_layers = "all"
    int8_checks_scores = True  # and still, a barely trained one moved SciFact by 0.007 (BENCHMARKS.md § int8_check)

    @classmethod
    def ranks_untrained_for(cls, config: CrossConfig) -> bool | None:
        # a classifier head ranks untrained only where the checkpoint brings a trained one: known once loaded
        return True if config.head in (DUAL_POOLED, GATED_SEGMENTS) else None

    @property
    def serves_first_token_only(self) -> bool:
        """Ranker: the [CLS] heads read the first token's state only; the dual-pooled and gated heads read every token."""
        return self.head_kind not in (DUAL_POOLED, GATED_SEGMENTS)

    def serving_pooler(self) -> nn.Module | None:
        """Ranker: BERT's pooler (tanh of a linear layer) of ``head: classifier`` runs in the serving graph; the final
        linear layer stays here in float32 (``forward``)."""
        return PoolerTanh(self.pooler) if self.serves_first_token_only and self.pooler is not None else None

    @classmethod
    def spec_of(cls, config: CrossConfig) -> dict[str, Any]:
        spec = super().spec_of(config)
        if config.head != DUAL_POOLED:
            spec.pop("dual_pooling")  # read by the dual-pooled head only
        if config.head != GATED_SEGMENTS:
            spec.pop("score_scale")  # read by the gated head only
        return spec

    @classmethod
    def carries_reconstruction_head(cls, config: CrossConfig) -> bool:
        return config.head in cls.reconstruction_heads

    def __init__(self, backbone: Backbone, tokenizer, spec):
        super().__init__(backbone, tokenizer, spec)
        config = backbone.config
        self.head_kind = self.arch_config.head
        self.dropout = nn.Dropout(getattr(config, "hidden_dropout_prob", 0.1))
        self.reconstruction = None
        self._kept: TokenStates | None = None
        if self.head_kind == DUAL_POOLED:
            self.dual_pooling = self.arch_config.dual_pooling
            self.special_ids = set(tokenizer.all_special_ids)
            self.sep_id = tokenizer.sep_token_id
            self.pooler = self.head = None
            self.reconstruction = TokenReconstructionHead(config)
            self.ranks_untrained = True  # no random scoring layer: the pretrained states rank as they are
            return
        if self.head_kind == GATED_SEGMENTS:
            self._gate_backbone(backbone, tokenizer)
            self.pooler = self.head = None
            # one gate per layer and head, 0: each segment attends to itself only and the model scores as the dense one
            self.gates = nn.Parameter(torch.zeros(config.num_hidden_layers, config.num_attention_heads))
            self.score_scale = float(self.arch_config.score_scale)
            self.ranks_untrained = True
            return
        if self.head_kind == "classifier":
            self.pooler = nn.Linear(config.hidden_size, config.hidden_size)
            with torch.no_grad():  # as transformers initialises a pooler the checkpoint lacks
                self.pooler.weight.normal_(0.0, getattr(config, "initializer_range", 0.02))
                self.pooler.bias.zero_()
        else:
            self.pooler = None
        self.head = nn.Linear(config.hidden_size, 1)  # the ranker, randomly initialised (001 §3.1)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        if self.head_kind == GATED_SEGMENTS:
            return self._gated_scores(input_ids, attention_mask, token_type_ids)
        hidden = self.backbone(input_ids, attention_mask, token_type_ids)
        if self.backbone.serves_pooled:  # the serving runtime ran the pooler in its graph (serving_pooler)
            return self.head(hidden[:, 0]).squeeze(-1)
        if self.head_kind != DUAL_POOLED:
            return self.score_cls(hidden[:, 0])
        q, d = self.proxies(hidden, input_ids, attention_mask, token_type_ids)
        scores = (q * d).sum(-1)
        kept = self._kept
        if kept is None:
            return scores
        kept.hidden, kept.input_ids, kept.attention_mask = hidden, input_ids, attention_mask
        if kept.term is None:
            return scores
        kept.value = kept.term(hidden, input_ids, attention_mask)
        # + 0 x the term: the scores (what DDP's find_unused_parameters traces from the forward's output) reach the
        # reconstruction head, so several processes see it used in this forward; the scores are unchanged
        return scores + 0.0 * kept.value

    # ------------------------------------------------------------ head: gated_segments
    def zero_start_parameters(self) -> list[nn.Parameter]:
        """The gates of ``gated_segments`` (0 at the start: each segment attends to itself only)."""
        return [self.gates] if self.head_kind == GATED_SEGMENTS else []

    def _gate_backbone(self, backbone: Backbone, tokenizer) -> None:
        """The backbone's attention becomes the gated one (``ssft.models.segment_gates``); a one-line error where it
        cannot be."""
        model_type = getattr(backbone.config, "model_type", None)
        if model_type not in GATED_MODEL_TYPES:
            raise SsftError(f"model.head: {GATED_SEGMENTS} needs a BERT-style encoder (model types "
                            f"{', '.join(GATED_MODEL_TYPES)}); '{self.spec.get('name', '')}' is '{model_type}'")
        if backbone.prompt_learning or backbone.hidden_prefix is not None:
            raise SsftError(f"model.head: {GATED_SEGMENTS} cannot take method '{backbone.method}': its virtual tokens "
                            "belong to neither segment; use full, lora or lora_pp")
        if self.query_max_length + 4 > self.max_length:  # the document keeps at least its [CLS], [SEP] and 2 tokens
            raise SsftError(f"model.head: {GATED_SEGMENTS} cuts the query at model.query_max_length "
                            f"({self.query_max_length}), which leaves the document no room in model.max_length "
                            f"({self.max_length}); raise max_length or lower query_max_length")
        if tokenizer.cls_token_id is None:
            raise SsftError(f"model.head: {GATED_SEGMENTS} needs a tokenizer with a [CLS] token to start each segment")
        self.cls_id = tokenizer.cls_token_id
        backbone.base_model.set_attn_implementation(ATTENTION)

    def _gated_scores(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                      token_type_ids: torch.Tensor | None) -> torch.Tensor:
        segments, positions = segment_layout(input_ids, attention_mask, self.cls_id, token_type_ids)
        hidden = self.backbone(input_ids, attention_mask, torch.zeros_like(input_ids), position_ids=positions,
                               segments=segments, gates=self.gates)
        q, d = segment_means(hidden.float(), segments)
        return self.score_scale * nn.functional.cosine_similarity(q, d, dim=-1)

    def proxies(self, hidden: torch.Tensor, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``head: dual_pooled``: the (query, document) proxy embeddings of the pairs (004 App. B Eq. 14 / 15)."""
        if token_type_ids is None:
            token_type_ids = segment_ids(input_ids, attention_mask, self.sep_id)
        return dual_pool(hidden, input_ids, attention_mask, token_type_ids, self.special_ids, self.sep_id,
                         self.dual_pooling)

    @contextmanager
    def keeping_token_states(self, term: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor] | None = None
                             ) -> Iterator[TokenStates]:
        """Forwards inside the block leave their last-layer states (with their graph) in the yielded record, and compute
        ``term(hidden, input_ids, attention_mask)`` (the reconstruction loss) inside the forward that scored the batch
        (``head: dual_pooled``; one forward per block)."""
        if self.reconstruction is None:
            raise SsftError(f"the reconstruction loss needs model.head: {DUAL_POOLED}, this cross-encoder's head is "
                            f"'{self.head_kind}'")
        self._kept = TokenStates(term)
        try:
            yield self._kept
        finally:
            self._kept = None

    def reconstruction_logits(self, states: torch.Tensor) -> torch.Tensor:
        """(n, hidden) last-layer token states → (n, vocabulary) logits of the token-reconstruction head, its decoder
        the backbone's input embeddings (``ssft.models.token_reconstruction``)."""
        return self.reconstruction(states, self.backbone.base_model.get_input_embeddings().weight)

    def score_cls(self, cls: torch.Tensor) -> torch.Tensor:
        """The head on [CLS] states (n, hidden) → scores (n,)."""
        if self.pooler is not None:
            cls = torch.tanh(self.pooler(cls))
        return self.head(self.dropout(cls)).squeeze(-1)

    def tokenize(self, queries: list[str], documents: list[str]) -> dict[str, torch.Tensor]:
        """Pairs to model inputs, as ``tokenizer(queries, documents, padding=True, truncation="longest_first",
        max_length=max_length)`` returns them (a long document is cut first), each distinct text tokenised once."""
        if self.head_kind == GATED_SEGMENTS:  # [CLS] q [SEP] [CLS] d [SEP]
            return self.token_cache().two_segments(queries, documents, self.query_max_length, self.max_length)
        return self.token_cache().pairs(queries, documents, self.max_length)  # = the tokenizer's own call

    def pair_token_lengths(self, queries: list[str], documents: list[str]) -> list[int]:
        if self.head_kind != GATED_SEGMENTS:
            return super().pair_token_lengths(queries, documents)
        return self.token_cache().two_segment_lengths(queries, documents, self.query_max_length, self.max_length)

    # ------------------------------------------------------------ a pretrained checkpoint's head
    def adopt_pretrained(self, pretrained: Pretrained) -> None:
        """A sequence-classification checkpoint's pooler and classifier (``head: classifier``), or a plain encoder's
        pretrained pooler. With ``head: cls_linear`` only an ssft ``cls_linear`` export's head is taken, folded back
        into one linear map (``exported_cls_linear``); anything else is left for the load report."""
        if self.reconstruction is not None:
            self.reconstruction.adopt(pretrained)  # a checkpoint's MLM head, when it has one
            return
        seq_cls = pretrained.kind == "sequence-classification"
        if self.pooler is None:  # cls_linear
            found = classifier_head(pretrained, take=False) if seq_cls else None
            folded = exported_cls_linear(found) if found is not None else None
            if folded is not None:
                classifier_head(pretrained)  # now used: not in the load report
                with torch.no_grad():
                    self.head.weight.copy_(folded[0])
                    self.head.bias.copy_(folded[1])
                self.ranks_untrained = True
            return
        head = classifier_head(pretrained) if seq_cls else None
        if head is not None and exported_cls_linear(head) is not None:
            pretrained.notes.append(
                f"a cross-encoder exported from model.head: cls_linear (its pooler is "
                f"{CLS_LINEAR_EPSILON:g}·I, its classifier scaled by 1/{CLS_LINEAR_EPSILON:g}): it scores as exported, "
                "but its head trains ill-conditioned; load it with model.head: cls_linear to train it")
        with torch.no_grad():
            if head is not None:
                self.pooler.weight.copy_(head["pooler.weight"])
                self.pooler.bias.copy_(head["pooler.bias"])
                self.head.weight.copy_(head["linear.weight"])
                self.head.bias.copy_(head["linear.bias"])
                self.ranks_untrained = True  # a trained head: the starting model ranks (epoch 0 is scored on test too)
                return
            for key in ("pooler.dense", f"{pretrained.config.get('model_type', 'bert')}.pooler.dense"):
                if pretrained.has(f"{key}.weight") and pretrained.has(f"{key}.bias"):
                    self.pooler.weight.copy_(pretrained.take(f"{key}.weight"))
                    self.pooler.bias.copy_(pretrained.take(f"{key}.bias"))
                    return

    def graph_refusal(self) -> str | None:
        return f"{GATED_NO_GRAPH}; serve it with backend torch" if self.head_kind == GATED_SEGMENTS else None

    def export_refusal(self) -> str | None:
        if self.head_kind == GATED_SEGMENTS:
            return f"{GATED_NO_GRAPH}; serve the run folder with ssft-rerank"
        if self.head_kind == DUAL_POOLED:
            return ("model.head: dual_pooled scores by the inner product of two pooled token states (004 App. B), which no "
                    "sequence-classification model expresses; serve the run folder with ssft-rerank")
        return None

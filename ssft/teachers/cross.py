"""A dual-pooled cross-encoder teacher for CE → DE distillation (004 §4.2, App. B).

A cross-encoder reads ``[CLS] query [SEP] document [SEP]`` jointly; dual pooling (``ssft.models.dual_pooling``:
``cls_sep``, Eq. 14, or ``segment_mean``, Eq. 15) takes two vectors from its last-layer states as *proxy* query and
document embeddings, and its score is their inner product, 004 App. B's s^t(q, d) = <emb_q, emb_d> (score scale 1,
the default: ``distillation.teacher_normalize`` null or false); ``teacher_normalize: true`` L2-normalises the proxies
and scores 20 × their cosine instead.

The teacher is any transformers encoder (hub id / folder) or the backbone of a saved ssft cross-encoder. 004 first
converts a [CLS]-pooled cross-encoder into a dual-pooled one (score distillation plus a token reconstruction loss,
§4.2): in ssft that is an ssft-train run of ``model.architecture: cross`` with ``model.head: dual_pooled`` and
``loss.reconstruction_weight`` > 0 (``ssft.models.cross``), whose run folder is then this teacher (its
``model.dual_pooling`` must be the ``teacher_pooling``). A cross-encoder that was not trained with dual pooling gives
proxies without the meaning the paper relies on.

An asymmetric student inherits the teacher's document embeddings (004 §5.3): ``inheritable_documents()`` is the
frozen empty-query document encoder of the same weights (``ssft.models.cross_documents``), each document's proxy of
the pair ("", d) computed once.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from ssft.config.choices import DUAL_POOLINGS
from ssft.core import precision as precisions
from ssft.core.errors import SsftError
from ssft.models.cross_documents import CrossDocumentEncoder, cross_reference, load_cross_transformer
from ssft.models.dual_pooling import dual_pool
from ssft.models.frozen import FrozenDense


class DualPooledCrossEncoderTeacher:
    """Frozen cross-encoder teacher: eval mode, no gradient, pairs of the current batch. Not an ``nn.Module``."""

    pairs_only = True  # embeds (query, document) pairs, never a query alone (ssft.training.distillation)

    def __init__(self, transformer, tokenizer, pooling: str, reference: dict[str, Any], max_length: int = 256,
                 score_scale: float | None = None, normalize: bool = False):
        if pooling not in DUAL_POOLINGS:
            raise SsftError(f"distillation.teacher_pooling: a cross-encoder teacher pools {' or '.join(DUAL_POOLINGS)}, "
                            f"got '{pooling}'")
        transformer.requires_grad_(False)
        transformer.eval()
        self.model = transformer
        self.tokenizer = tokenizer
        self.pooling = pooling
        self.reference = dict(reference)
        self.max_length = int(max_length)
        self.normalize = bool(normalize)
        self.score_scale = float(score_scale if score_scale is not None else (20.0 if self.normalize else 1.0))
        self.special_ids = set(tokenizer.all_special_ids)
        self.sep_id = tokenizer.sep_token_id
        self.precision = "fp32"  # ssft.core.precision; set_precision
        self.bf16_weights = precisions.BF16Weights()
        self._documents: FrozenDense | None = None  # inheritable_documents, built once

    @property
    def embedding_dim(self) -> int:
        return self.model.config.hidden_size

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def set_precision(self, precision: str) -> DualPooledCrossEncoderTeacher:
        """Compute in ``precision`` from now on (``ssft.core.precision``; int8: a quantised copy of the encoder)."""
        self.precision = precisions.resolve(precision, self.device, "eval.precision")
        if self.precision == "int8":
            self.model = precisions.quantize_int8(self.model)
        self._documents = None  # rebuilt on the teacher's new weights / precision
        return self

    def inheritable_documents(self) -> FrozenDense:
        """The frozen empty-query document encoder of this teacher's weights (004 §5.3; ``ssft.models.cross_documents``),
        what ``DenseDualEncoder.inherit_documents`` takes: each document's proxy of ("", d), L2-normalised as this
        teacher's proxies are (``normalize``)."""
        if self._documents is None:
            encoder = CrossDocumentEncoder(self.model, self.tokenizer, self.pooling, self.max_length, self.normalize,
                                           self.reference)
            if self.precision == "int8":  # its transformer is the teacher's quantised copy: say so (cache keys)
                object.__setattr__(encoder, precisions.ATTRIBUTE, "int8")
            else:
                precisions.set_precision(encoder, self.precision)
            self._documents = FrozenDense(encoder, self.reference)
        return self._documents

    def to(self, device) -> DualPooledCrossEncoderTeacher:
        self.model.to(device)
        return self

    def tokenize(self, queries: list[str], documents: list[str] | None = None) -> dict[str, torch.Tensor]:
        """Every (query, document) pair of the batch, in the student's pair order (``t_p_*`` keys)."""
        if documents is None:
            raise SsftError("distillation.query_only: a cross-encoder teacher needs (query, document) pairs")
        out = self.tokenizer(queries, documents, padding=True, truncation="only_second", max_length=self.max_length,
                             return_tensors="pt", return_token_type_ids=True)
        return {"t_p_input_ids": out["input_ids"], "t_p_attention_mask": out["attention_mask"],
                "t_p_token_type_ids": out["token_type_ids"]}

    def pairs(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
              token_type_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Proxy query and document embeddings of the pairs, L2-normalised unless ``normalize`` is off (eval mode, no
        gradient)."""
        self.model.eval()
        device = input_ids.device
        ids, mask, types = (t.to(self.device) for t in (input_ids, attention_mask, token_type_ids))
        with torch.no_grad():
            def forward() -> torch.Tensor:
                return self.model(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state

            hidden = (self.bf16_weights.call(self.model, forward) if self.precision == "bf16" else forward()).float()
            q, d = dual_pool(hidden, ids, mask, types, self.special_ids, self.sep_id, self.pooling)
        if self.normalize:
            q, d = F.normalize(q, dim=-1), F.normalize(d, dim=-1)
        return q.to(device), d.to(device)


def load_cross_teacher(name: str, pooling: str, max_length: int, trust_remote_code: bool = False,
                       normalize: bool = False) -> DualPooledCrossEncoderTeacher:
    """A transformers encoder by hub id / folder, or the backbone of a saved ssft cross-encoder folder (one trained with
    ``head: dual_pooled`` must have been trained with ``pooling``). ``normalize``: 20 × cosine of the proxies instead
    of their inner product (004 App. B, the default). ``trust_remote_code``: the user's choice (the recipe's
    model.trust_remote_code), never a saved folder's."""
    if pooling not in DUAL_POOLINGS:
        raise SsftError(f"distillation.teacher_pooling: a cross-encoder teacher pools {' or '.join(DUAL_POOLINGS)}, "
                        f"got '{pooling}'")
    reference = cross_reference(name, pooling, max_length, normalize)
    transformer, tokenizer = load_cross_transformer(name, pooling, trust_remote_code)
    return DualPooledCrossEncoderTeacher(transformer, tokenizer, pooling, reference, max_length, normalize=normalize)


__all__ = ["DUAL_POOLINGS", "DualPooledCrossEncoderTeacher", "dual_pool", "load_cross_teacher"]

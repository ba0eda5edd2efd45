"""A frozen teacher scored inside the training loop (TCT-ColBERT, 003 §3.1: the "tightly coupled" teacher).

- ``FrozenTeacher.load(name, model_cfg)``: ``name`` is a saved ssft model folder, an ``ssft-train`` run folder
  (its ``model/``), or a hub name / transformers folder, which is built as a ColBERT (``[Q]``/``[D]`` markers,
  128-d projection — untrained unless the weights carry one; the lengths come from the student's
  ``model`` section). Any bi-encoder ranker can teach; a cross-encoder cannot (003 rules it out: too slow to
  score every in-batch pair).
- the teacher is frozen (no parameter requires grad, it is no part of the student nor of the optimizer), kept
  in eval mode (no dropout), and scores under ``torch.no_grad``.
- ``tokenize`` gives the collator the teacher's own inputs for the batch's *distinct* queries and documents,
  in the order ``BiEncoder.tokenize`` gives the student's (both use ``unique_with_index``), so the teacher's
  (queries × documents) matrix lines up with the student's ``forward(..., all_pairs=True)`` cell for cell.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

from ssft.config.model import ModelConfig
from ssft.config.registry import MODELS
from ssft.core.errors import SsftError
from ssft.core.hub import resolve_model
from ssft.core.precision import set_precision as set_model_precision
from ssft.models.base import SPEC_FILE, Ranker, load_ranker, saved_model_folder
from ssft.models.bi import BiEncoder, group_items, query_positives, unique_with_index
from ssft.models.colbert import ColBert

logger = logging.getLogger(__name__)

TEACHER_KEYS = ("teacher_q_input_ids", "teacher_q_attention_mask", "teacher_d_input_ids", "teacher_d_attention_mask")


def check_teacher(name: str, where: str = "loss.teacher") -> None:
    """Fail early (before a run writes anything) when ``name`` is neither a saved ssft model nor a model that
    ``resolve_model`` finds."""
    folder = saved_model_folder(name)
    if folder is not None:
        spec = Ranker.read_spec(folder)
        _check_architecture(spec["architecture"], f"{where}: {folder}")
        return
    if Path(name).is_dir() and not (Path(name) / "config.json").is_file():
        raise SsftError(f"{where}: {name} is neither a saved ssft model ({SPEC_FILE}, or model/{SPEC_FILE}) "
                        f"nor a transformers model folder (config.json)")
    try:
        resolve_model(name)
    except SsftError as err:
        raise SsftError(f"{where}: {err}") from None


def _check_architecture(architecture: str, where: str) -> None:
    cls = MODELS.get(architecture, where)
    if not issubclass(cls, BiEncoder):
        raise SsftError(f"{where}: a '{architecture}' ranker cannot teach in the loop; the teacher must be a "
                        f"bi-encoder (colbert, twin, dense)")


class FrozenTeacher:
    """A frozen bi-encoder ranker that scores every (query, document) pair of a training batch."""

    def __init__(self, ranker: BiEncoder, name: str = ""):
        if not isinstance(ranker, BiEncoder):
            raise SsftError(f"teacher {name}: a '{getattr(ranker, 'architecture', type(ranker).__name__)}' ranker cannot "
                            f"teach in the loop; the teacher must be a bi-encoder (colbert, twin, dense)")
        ranker.requires_grad_(False)
        ranker.eval()
        self.ranker = ranker
        self.name = name

    @classmethod
    def load(cls, name: str, model_cfg: Any = None) -> FrozenTeacher:
        """The teacher ``name`` names (see the module docstring); ``model_cfg`` (the student's ``ModelConfig``)
        gives the lengths of a teacher built from a hub name."""
        check_teacher(name)
        folder = saved_model_folder(name)
        if folder is not None:
            # the student's recipe (model.trust_remote_code) is the user's choice; the teacher folder's is not
            ranker = load_ranker(folder, trust_remote_code=bool(getattr(model_cfg, "trust_remote_code", False)))
            logger.info("teacher: saved %s ranker %s (%s)", ranker.architecture, folder, ranker.spec.get("base_model"))
        else:
            lengths = {} if model_cfg is None else {"max_length": model_cfg.max_length,
                                                    "query_max_length": model_cfg.query_max_length,
                                                    "trust_remote_code": model_cfg.trust_remote_code}
            ranker = ColBert.build(ModelConfig(architecture="colbert", name=name, **lengths), "full", {})
            logger.warning("teacher: %s built as a ColBERT as-is (its 128-d projection is untrained); a ColBERT "
                           "fine-tuned with ssft-train (its run folder) is the paper's teacher", name)
        return cls(ranker, name)

    @property
    def device(self) -> torch.device:
        return next(self.ranker.parameters()).device

    def set_precision(self, precision: str) -> FrozenTeacher:
        """Score in ``precision`` from now on (``ssft.core.precision``; int8: a quantised copy)."""
        self.ranker = set_model_precision(self.ranker, precision)
        return self

    def initialise_student(self, student: BiEncoder) -> int:
        """003 §4: "at the second stage, we initialize the student model using the trained weights of the teacher
        model". Copies the teacher's transformer weights (its backbone, under any adapter) into every transformer
        tower of ``student`` (the query backbone, and a separate document backbone); the teacher's scoring modules
        (ColBERT's projection, which 003 §3.1 removes) are not copied. A student adapter's own weights (LoRA, prefix)
        keep their initialisation. The towers must be the same transformer as the teacher's (names and shapes), else
        one ``SsftError``. Returns the number of tensors copied."""
        source = self.ranker.backbone.base_model.state_dict()
        copied = 0
        for tower_name in ("backbone", "document_backbone"):
            tower = getattr(student, tower_name, None)
            if tower is None:
                continue
            target = tower.base_model
            state = target.state_dict()
            new = {}
            for key, value in state.items():
                if ".lora_" in key or "hidden_prefix" in key:  # the student adapter's own weights
                    continue
                plain = key.replace(".base_layer.", ".")
                if plain not in source or source[plain].shape != value.shape:
                    found = "missing" if plain not in source else f"shaped {tuple(source[plain].shape)}"
                    teacher = f"{self.name or ''} ({self.ranker.spec.get('base_model')})"
                    raise SsftError(f"loss.init_from_teacher: the teacher {teacher} is not the student's transformer: "
                                    f"its {plain} is {found}, the student's {tower_name} has {tuple(value.shape)}")
                new[key] = source[plain]
            target.load_state_dict(new, strict=False)
            copied += len(new)
        logger.info("student initialised from the teacher's weights (003 §4): %d tensors", copied)
        return copied

    def tokenize(self, queries: list[str], documents: list[str]) -> dict[str, torch.Tensor]:
        """The teacher's inputs for the distinct queries and documents of a batch (see the module docstring)."""
        unique_q, _ = unique_with_index(queries)
        unique_d, _ = unique_with_index(documents)
        q = self.ranker.tokenize_queries(unique_q)
        d = self.ranker.tokenize_documents(unique_d)
        return {"teacher_q_input_ids": q["input_ids"], "teacher_q_attention_mask": q["attention_mask"],
                "teacher_d_input_ids": d["input_ids"], "teacher_d_attention_mask": d["attention_mask"]}

    def score_matrix(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """(distinct queries, distinct documents) teacher scores of the batch, without gradient."""
        device = inputs["teacher_q_input_ids"].device
        if self.device != device:
            self.ranker.to(device)
        self.ranker.eval()  # whatever called .train() on it: a teacher never runs dropout
        with torch.no_grad():
            q = self.ranker.encode_tokens(inputs["teacher_q_input_ids"], inputs["teacher_q_attention_mask"], "query")
            d = self.ranker.encode_tokens(inputs["teacher_d_input_ids"], inputs["teacher_d_attention_mask"], "document")
            return self.ranker.score_matrix(q, d).float()


def batch_items(q_index: torch.Tensor, d_index: torch.Tensor, group: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """For a training batch of (query, [positive, negatives...]) groups: each item's query row and positive column
    among the distinct queries / documents, and the (items, documents) mask of the *other* positives of the
    item's query in the batch."""
    item_q, item_pos = group_items(q_index, d_index, group)
    excluded = query_positives(item_q, item_pos, int(d_index.max()) + 1)
    excluded[torch.arange(len(item_q), device=d_index.device), item_pos] = False  # the item's own positive stays
    return item_q, item_pos, excluded


__all__ = ["FrozenTeacher", "TEACHER_KEYS", "batch_items", "check_teacher"]

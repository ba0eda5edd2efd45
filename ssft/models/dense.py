"""Dense dual encoder (000 §3.1, §5.2): one vector per text, dot-product score, towers that may differ.

- Towers: ``model.name`` is the query tower; ``model.document_name`` the document tower — a different model
  with its own tokenizer (heterogeneous, e.g. a MiniLM-L6 query tower with an MPNet-base document tower), or
  the same name for two separately trained copies. ``document_name: null`` shares one backbone (Siamese), unless
  ``model.name`` is a sentence-transformers ``Router`` folder whose query and document routes hold different
  transformers (what ``ssft-export`` writes for two towers): its query route is then the query tower and its document
  route the document tower (``document_name`` = the folder; a Router named as ``document_name`` gives its document
  route), their Dense modules the shared projection (``spec_from_routes``). Semi-Siamese LoRA, exported merged once
  per tower, comes back as two full towers.
  000's lightweight query encoders (BERT_{L=2}, …) are separately pre-trained small BERTs (Turc et al. 2019,
  000 §5.3.2 ref. [29]) named as the query tower (``model.name``) beside a BERT-base document tower.
- ``model.query_layers``: 002's layer-subset student (002 §2.1): keep only some transformer layers of the query
  tower, N = the first N, a list = those layer indices (e.g. [0, 5] of a 6-layer teacher), embeddings and pooling
  kept (``ssft.adapters.backbone.select_layers``). With a shared backbone (``document_name: null``) both towers
  are that subset. Not 000's set-up (see Towers).
- Inherited documents (asymmetric student, 002 and 004 §4.1): ``inherit_documents(teacher)`` makes another
  frozen dense model encode the documents — its final document embeddings are this model's, and its corpus
  index (and on-disk embedding cache) is the one this model retrieves from; only the query tower trains. The
  teacher is not a parameter of this model: the saved spec names it (``document_encoder``) and loading
  rebuilds it.
- Pooling: ``mean`` (default) or ``cls`` (000 uses the CLS output).
- ``model.projection_dim`` a: a *shared* linear projection W·LM(x) + b applied to both towers, then L2
  normalisation (000 Eq. 10–11). When the towers' hidden sizes differ, the smaller vectors are zero-padded to
  the larger size before the shared projection (so W's first columns act on both). A square projection starts
  as the identity (keeps the pretrained geometry); a rectangular one starts at PyTorch's default. ``null``:
  no projection, only L2 normalisation (then the hidden sizes must match).
- ``model.normalize``: true L2-normalises the final vectors, so the score is a scaled cosine (000 Eq. 11); the
  default, null, takes what a SentenceTransformer checkpoint does (a Normalize module or not) and is true otherwise.
  ``false``: the raw dot product of the pooled (projected) states — 003's TCT student (Eq. 2, 5: average-pooled
  states, inner product), with ``score_scale: 1``; 002's teacher (msmarco-bert-base-dot-v5) and 004's encoders
  (Eq. 1) also score by the raw dot product.
- Score: ``model.score_scale`` (20, 000 §5.3.2 after Lindgren et al.) × ζ(q)·η(d).

Training (``forward(..., group_size=g)``) returns, for every (query, positive) item of the batch, the
positive's score followed by the scores of every other document in the batch (in-batch negatives plus the
hard negatives of all queries), the item's other positives masked out with -inf, plus — when a
``NegativeCache`` is attached — scores of negatives drawn from it: the rows Eq. 5's loss takes.

A frozen separate document tower (DAFT stage 1, or a frozen model at evaluation) keeps its pooled,
pre-projection document vectors in memory by token ids, so each document goes through it once.
"""
from __future__ import annotations

import copy
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoTokenizer

from ssft.adapters.backbone import Backbone, select_layers
from ssft.config.model import ArchitectureConfig
from ssft.config.parse import Problem
from ssft.config.registry import ADAPTERS
from ssft.core.distributed import gather_objects, gather_rows, rank, world_size
from ssft.core.errors import SsftError
from ssft.core.hub import resolve_model
from ssft.models.base import SPEC_FILE, load_backbone, load_pretrained, save_backbone
from ssft.models.batching import single_lengths, token_lengths
from ssft.models.bi import BiEncoder, Encoded, group_items, query_positives, row_keys
from ssft.models.frozen import load_frozen_dense
from ssft.models.interop.checkpoint import router_towers
from ssft.models.twin import POOLINGS, mean_pool

logger = logging.getLogger(__name__)

DOCUMENT_TOWER = "document_tower"  # sub-folder of a saved ranker holding the separate document tower


@dataclass
class DenseConfig(ArchitectureConfig):
    """The dense dual encoder's model keys (see the module docstring)."""

    document_name: str | None = None  # the document tower's model (own tokenizer); null = one shared backbone
    pooling: str = "mean"  # mean | cls
    projection_dim: int | None = None  # the shared projection's size a (000 Eq. 10-11); null = none
    score_scale: float = 20.0  # scores are scale * dot product of the final vectors
    query_layers: int | list[int] | None = None  # 002's layer-subset student: the first N layers, or a list of them
    # L2-normalise the final vectors (false: the raw dot product, 003 Eq. 2/5); null = as the checkpoint does (a
    # SentenceTransformer folder's Normalize module), else true
    normalize: bool | None = None

    def problem(self) -> Problem:
        if self.pooling not in POOLINGS:
            return "pooling", f"expected one of {', '.join(POOLINGS)}, got '{self.pooling}'"
        layers = self.query_layers
        if isinstance(layers, int) and layers < 1:
            return "query_layers", "must be >= 1, a list of layer indices, or null"
        if isinstance(layers, list) and (not layers or layers != sorted(set(layers)) or layers[0] < 0):
            return "query_layers", f"a list of layers must be increasing distinct indices >= 0, got {layers}"
        if self.projection_dim is not None and self.projection_dim < 1:
            return "projection_dim", "must be >= 1 or null"
        if self.score_scale <= 0:
            return "score_scale", "must be > 0"
        return None


class DenseDualEncoder(BiEncoder):
    architecture = "dense"
    Config = DenseConfig
    backbone_prefixes = ("backbone.", "document_backbone.")
    cache_document_embeddings = True  # a frozen model's corpus vectors go to the on-disk cache (embedding_cache)
    full_retrieval = True  # evaluated by retrieval over the whole corpus (ssft.eval.retrieve), not reranking
    in_batch_negatives = True  # training rows from forward(..., group_size=g)
    distillation_student = True  # the student of a recipe's distillation section (ssft.training.distillation)

    def __init__(self, backbone: Backbone, tokenizer, spec: dict[str, Any], document_backbone: Backbone | None = None,
                 document_tokenizer=None):
        super().__init__(backbone, tokenizer, spec)
        self.document_backbone = document_backbone
        self.document_tokenizer = document_tokenizer if document_tokenizer is not None else tokenizer
        config = self.arch_config
        self.pooling = config.pooling
        self.score_scale = float(config.score_scale)
        self.normalize = config.normalize is not False  # null (not resolved from a checkpoint): true
        q_dim = backbone.config.hidden_size
        d_dim = document_backbone.config.hidden_size if document_backbone is not None else q_dim
        self.hidden_dim = max(q_dim, d_dim)
        a = config.projection_dim
        if a is None:
            if q_dim != d_dim:
                raise SsftError(f"model.projection_dim: the query tower has hidden size {q_dim} and the document tower "
                                f"{d_dim}; set a shared projection size (000 Eq. 10-11), e.g. projection_dim: {d_dim}")
            self.projection = None
        else:
            self.projection = nn.Linear(self.hidden_dim, int(a))
            if int(a) == self.hidden_dim:
                with torch.no_grad():
                    self.projection.weight.copy_(torch.eye(self.hidden_dim))
                    self.projection.bias.zero_()
        self.negative_cache = None  # a NegativeCache attached for training (ssft.models.negative_cache)
        self.last_num_negatives: float | None = None
        self.loss_weight = 1.0  # set by a training forward; != 1 when processes hold different item counts
        self._frozen_documents: dict[bytes, torch.Tensor] = {}
        self.keep_frozen_documents = True  # False: always run the document tower (latency measurements)
        object.__setattr__(self, "document_teacher", None)  # inherited documents: not a submodule, not saved or trained

    @property
    def embedding_dim(self) -> int:
        """Size of the final (projected, normalised) vectors."""
        return self.projection.out_features if self.projection is not None else self.hidden_dim

    # ------------------------------------------------------------ building / saving
    @classmethod
    def build(cls, model_cfg, method: str, options: dict[str, Any], config: Any = None) -> DenseDualEncoder:
        arch_config = copy.deepcopy(model_cfg.config)
        document_name = arch_config.document_name
        router = document_name is None and bool(router_towers(Path(resolve_model(model_cfg.name))))
        if router:  # a sentence-transformers Router with two towers: its document route is the document tower
            document_name = model_cfg.name
        separate = document_name is not None
        adapter = ADAPTERS.get(method)
        if separate and adapter.one_backbone_only:
            single = ", ".join(ADAPTERS.matching(lambda a: not a.one_backbone_only))
            why = (f"model.name '{model_cfg.name}' is a Router with separate query and document towers" if router
                   else "with a separate model.document_name")
            raise SsftError(f"adapter.method: '{method}' wires one backbone into query/document towers; {why}: use a "
                            f"single-backbone method ({single})")
        if config is None:
            config = adapter.config_from(options)

        def tower(name: str, layers: int | None, route: str) -> tuple[Backbone, Any, Any]:
            transformer, tokenizer, pretrained = load_pretrained(name, model_cfg.trust_remote_code, route)
            if layers is not None:
                select_layers(transformer, layers, name)
            for p in transformer.parameters():
                p.requires_grad_(False)
            return adapter.apply(transformer, config), tokenizer, pretrained

        query_backbone, query_tokenizer, pretrained = tower(model_cfg.name, arch_config.query_layers, "query")
        if pretrained.two_towers and not router:
            pretrained.notes.append(f"its document route ({pretrained.modules.towers['document']}) is not used: "
                                    f"model.document_name is {document_name}")
        document_backbone, document_tokenizer, document_pretrained = (
            tower(document_name, None, "document") if separate else (None, None, None))
        arch_config.document_name = document_name
        spec = cls.build_spec(model_cfg, method, options, arch_config)
        cls.spec_from_pretrained(spec, arch_config, pretrained)
        shared = cls.spec_from_routes(arch_config, pretrained, document_pretrained) if document_pretrained is not None else None
        spec.update(cls.spec_of(arch_config))
        model = cls(query_backbone, query_tokenizer, spec, document_backbone, document_tokenizer)
        model.adopt_pretrained(pretrained)
        if shared is not None:  # the routes' Dense modules: one shared projection
            with torch.no_grad():
                model.projection.weight.copy_(shared[0])
                model.projection.bias.copy_(shared[1] if shared[1] is not None else torch.zeros_like(model.projection.bias))
        for checkpoint in (pretrained, document_pretrained):
            if checkpoint is not None:
                checkpoint.report(model.quiet_unused(checkpoint))
        return model

    # ------------------------------------------------------------ a SentenceTransformer checkpoint's modules
    @classmethod
    def spec_from_pretrained(cls, spec: dict[str, Any], config: DenseConfig, pretrained) -> None:
        """Besides the prompts (``BiEncoder``): a single linear Dense module is the projection (adopted when
        ``model.projection_dim`` is null or its size); a Normalize module, or its absence, decides
        ``model.normalize: null`` (the default) and is checked against a value the recipe sets (a difference is
        reported; the recipe's value is used). Anything else than an ST folder: null = true."""
        super().spec_from_pretrained(spec, config, pretrained)
        modules = pretrained.modules
        from_modules = modules is not None and pretrained.kind == "sentence-transformers"
        if config.normalize is None:  # model.normalize: null = as the checkpoint does (a Normalize module or not)
            config.normalize = modules.normalize if from_modules else True
        if not from_modules:
            return
        if modules.towers:  # a Router's query route: its Dense module is read with the document route's (spec_from_routes)
            return
        if modules.normalize != config.normalize:
            pretrained.notes.append(f"its modules {'end in' if modules.normalize else 'have no'} a Normalize module, "
                                    f"model.normalize is {str(config.normalize).lower()} (used)")
        dense = _linear_dense(modules)
        if dense is None:
            if modules.dense:
                kinds = ", ".join(d.activation.rsplit(".", 1)[-1] for d in modules.dense)
                pretrained.notes.append(f"its Dense modules ({kinds}) are not one linear map (ssft's projection): not used")
            return
        size = dense.weight.shape[0]
        if config.projection_dim is None and config.document_name is None:
            config.projection_dim = size
        elif config.projection_dim != size:
            pretrained.notes.append(f"its Dense module ({size} dimensions) is not used: model.projection_dim is "
                                    f"{config.projection_dim}")

    @classmethod
    def spec_from_routes(cls, config: DenseConfig, query, document) -> tuple[torch.Tensor, torch.Tensor | None] | None:
        """Query and document towers read from a sentence-transformers Router's two routes (what ``ssft-export``
        writes for two towers; 000 Eq. 10-11): the routes' linear Dense modules are the two slices of ssft's one shared
        projection — the wider tower's is the projection, the narrower's must be its first columns (a narrower tower is
        zero-padded), biases equal — adopted when ``model.projection_dim`` is null or their size; the document route's
        Normalize and Pooling modules are checked against the query route's settings (a difference is reported).
        Returns the projection's (weight, bias), or None."""
        if document.modules is None or document.modules.route != "document" or query.modules is None:
            return None
        qm, dm = query.modules, document.modules
        if dm.normalize != bool(config.normalize):
            document.notes.append(f"its document route {'ends' if dm.normalize else 'does not end'} in a Normalize module; "
                                  f"model.normalize is {str(bool(config.normalize)).lower()} for both towers (used)")
        if dm.pooling is not None and dm.pooling != config.pooling:
            document.notes.append(f"its document route pools '{dm.pooling}', model.pooling is '{config.pooling}' (used)")
        q_dense, d_dense = _linear_dense(qm), _linear_dense(dm)
        if q_dense is None and d_dense is None:
            return None
        if q_dense is None or d_dense is None:
            document.notes.append("only one of its routes has a linear Dense module; ssft's dense shares one projection "
                                  "between the towers: not used")
            return None
        wide, narrow = (q_dense, d_dense) if q_dense.weight.shape[1] >= d_dense.weight.shape[1] else (d_dense, q_dense)
        same_bias = (wide.bias is None and narrow.bias is None) or (
            wide.bias is not None and narrow.bias is not None and torch.equal(wide.bias, narrow.bias))
        if (wide.weight.shape[0] != narrow.weight.shape[0] or not same_bias
                or not torch.equal(narrow.weight, wide.weight[:, :narrow.weight.shape[1]])):
            document.notes.append("its routes' Dense modules are not one shared projection (ssft's dense shares one "
                                  "between the towers, 000 Eq. 10-11): not used")
            return None
        size = int(wide.weight.shape[0])
        if config.projection_dim is None:
            config.projection_dim = size
        elif config.projection_dim != size:
            document.notes.append(f"its routes' Dense modules ({size} dimensions) are not used: model.projection_dim is "
                                  f"{config.projection_dim}")
            return None
        return wide.weight, wide.bias

    def adopt_pretrained(self, pretrained) -> None:
        dense = _linear_dense(pretrained.modules) if pretrained.kind == "sentence-transformers" else None
        if dense is None or self.projection is None or tuple(dense.weight.shape) != tuple(self.projection.weight.shape):
            return
        with torch.no_grad():
            self.projection.weight.copy_(dense.weight)
            self.projection.bias.copy_(dense.bias if dense.bias is not None else torch.zeros_like(self.projection.bias))

    def _save_extra(self, folder: Path) -> None:
        if self.document_backbone is None:
            return
        sub = folder / DOCUMENT_TOWER
        sub.mkdir()
        document_name = self.arch_config.document_name
        (sub / "tower.json").write_text(json.dumps({"base_model": document_name}, indent=2) + "\n")
        self.document_tokenizer.save_pretrained(sub)
        save_backbone(self.document_backbone, sub, document_name, self._frozen_base())

    @classmethod
    def from_loaded(cls, path: Path, backbone: Backbone, tokenizer, spec: dict[str, Any],
                    trust_remote_code: bool = False) -> DenseDualEncoder:
        teacher = spec.get("document_encoder")  # an asymmetric student's: the teacher encodes documents
        if teacher is not None:
            model = cls(backbone, tokenizer, spec)
            model.inherit_documents(load_frozen_dense(teacher, trust_remote_code=trust_remote_code))
            return model
        document_name = cls.config_from_spec(spec, f"{path}/{SPEC_FILE}: model").document_name
        if document_name is None:
            return cls(backbone, tokenizer, spec)
        sub = Path(path) / DOCUMENT_TOWER
        if not sub.is_dir():
            raise SsftError(f"{path}/{SPEC_FILE}: names a document tower '{document_name}' but {DOCUMENT_TOWER}/ "
                            f"is missing")
        # a Router folder named as the document tower: its document route (load_pretrained's route)
        document_backbone = load_backbone(sub, spec["method"], document_name, trust_remote_code, spec,
                                          route="document")
        return cls(backbone, tokenizer, spec, document_backbone,
                   AutoTokenizer.from_pretrained(sub, trust_remote_code=trust_remote_code))

    # ------------------------------------------------------------ inherited documents (asymmetric student)
    def inherit_documents(self, teacher) -> None:
        """Documents are from now on encoded by ``teacher`` (a ``ssft.models.frozen.FrozenDense``, e.g. the
        distillation teacher ``ssft.teachers.dense.DenseTeacher``: frozen, eval mode, no gradient): 004's asymmetric
        student that inherits the teacher's document encoder / embeddings, 002's student query encoder served
        against the teacher's unchanged index. The spec records the teacher's reference, so loading the student
        rebuilds it (``load_frozen_dense``)."""
        if not getattr(teacher, "frozen_document_encoder", False):
            raise SsftError(f"distillation.inherit_documents: a {type(teacher).__name__} teacher has no document index to "
                            f"inherit; the teacher must be a frozen dense model")
        if self.document_backbone is not None:
            raise SsftError("distillation.inherit_documents: the student has its own document tower (model.document_name); "
                            "an asymmetric student has a query tower only (set model.document_name: null)")
        if teacher.model.embedding_dim != self.embedding_dim:
            raise SsftError(f"distillation.inherit_documents: the student's query vectors have {self.embedding_dim} dimensions, "
                            f"the teacher's document vectors {teacher.model.embedding_dim}; set model.projection_dim: "
                            f"{teacher.model.embedding_dim} (004 Eq. 7's projection)")
        object.__setattr__(self, "document_teacher", teacher)
        self.document_tokenizer = teacher.model.document_tokenizer
        self.spec["document_encoder"] = dict(teacher.reference)

    def export_refusal(self) -> str | None:
        teacher = self.document_teacher
        if teacher is not None and not getattr(teacher.model, "exportable", True):
            return ("the documents are inherited from a cross-encoder (its empty-query document proxies, 004 §5.3), which "
                    "no SentenceTransformer document route expresses; serve the run folder with ssft-retrieve")
        return None

    def document_source(self) -> DenseDualEncoder:
        """The model whose document vectors this one retrieves from (its index, its embedding cache)."""
        return self.document_teacher.model if self.document_teacher is not None else self

    # ------------------------------------------------------------ towers
    def tower_parameters(self, tower: str) -> list[nn.Parameter]:
        """The parameters only ``tower`` uses (the shared projection belongs to neither). A Siamese model has one
        backbone for both towers: asking for either returns it. Inherited documents: the document tower has none."""
        if tower == "document" and self.document_teacher is not None:
            return []
        if tower == "document" and self.document_backbone is not None:
            return list(self.document_backbone.parameters())
        if tower not in ("query", "document"):
            raise ValueError(f"tower must be 'query' or 'document', got {tower!r}")
        return list(self.backbone.parameters())

    def document_tower_frozen(self) -> bool:
        return self.document_backbone is not None and not any(p.requires_grad for p in self.document_backbone.parameters())

    def tokenize_documents(self, texts: list[str]) -> dict[str, torch.Tensor]:
        if self.document_teacher is not None:  # the teacher's tokens, so kept embeddings match its own
            return self.document_teacher.model.tokenize_documents(texts)
        out = self.token_cache(self.document_tokenizer).single(self.prompted(texts, "document"), self.max_length)
        return {"input_ids": out["input_ids"], "attention_mask": out["attention_mask"]}

    def token_lengths(self, texts, tower: str) -> list[int]:
        """Tokens of each text's row (``BiEncoder.token_lengths``): a document's in the document tower's tokenizer,
        or the teacher's for inherited documents.

        Args:
            texts: the texts.
            tower: ``query`` or ``document``.

        Returns:
            One count per text.
        """
        if tower != "document":
            return super().token_lengths(texts, tower)
        if self.document_teacher is not None:
            return token_lengths(self.document_teacher.model, texts, "document")
        tokenizer = self.document_tokenizer
        return single_lengths(tokenizer, self.token_cache(tokenizer), self.prompted(list(texts), "document"),
                              self.max_length)

    def asymmetry(self) -> str | None:
        """``BiEncoder.asymmetry``: also a separate document tower, or documents inherited from a teacher.

        Returns:
            The reason in words, or None for a symmetric model.
        """
        if self.document_teacher is not None:
            return "its documents are encoded by its teacher"
        if self.document_backbone is not None:
            return f"a separate document tower, {self.arch_config.document_name}"
        return super().asymmetry()

    # ------------------------------------------------------------ the encode path
    def _pool(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return hidden[:, 0] if self.pooling == "cls" else mean_pool(hidden, attention_mask)

    def pooled(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, tower: str) -> torch.Tensor:
        """LM(x): the tower's pooled last-layer states, before the projection."""
        if tower == "document" and self.document_backbone is not None:
            if self.document_tower_frozen() and self.keep_frozen_documents:
                return self._pooled_frozen_documents(input_ids, attention_mask)
            self._frozen_documents.clear()  # the tower trains: whatever was kept is stale
            return self._pool(self.document_backbone(input_ids, attention_mask, tower=tower), attention_mask)
        return self._pool(self.backbone(input_ids, attention_mask, tower=tower), attention_mask)

    def _pooled_frozen_documents(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        keys = row_keys(input_ids, attention_mask)
        first_row: dict[bytes, int] = {}
        for i, k in enumerate(keys):
            first_row.setdefault(k, i)
        rows = [i for k, i in first_row.items() if k not in self._frozen_documents]
        if rows:
            index = torch.tensor(rows, device=input_ids.device)
            ids, mask = input_ids[index], attention_mask[index]
            width = int(mask.sum(1).max())
            if not mask[:, width:].any():  # right-padded: drop the columns no row attends
                ids, mask = ids[:, :width], mask[:, :width]
            # a frozen tower is a fixed function: no dropout, so a document's kept vector does not depend on when it
            # was first seen (nor does the random state), which exact resume needs. Nor on the batch it came in:
            # training's bf16 autocast (training.bf16) is switched off here, as bf16 rounding depends on the batch's
            # padded width; the tower computes at its own inference precision (float32 while training)
            was_training = self.document_backbone.training
            self.document_backbone.eval()
            try:
                with torch.no_grad(), torch.autocast(ids.device.type, enabled=False):
                    vectors = self._pool(self.document_backbone(ids, mask, tower="document"), mask)
            finally:
                self.document_backbone.train(was_training)
            for r, v in zip(rows, vectors):
                self._frozen_documents[keys[r]] = v.detach()
        return torch.stack([self._frozen_documents[k] for k in keys])

    def project(self, pooled: torch.Tensor) -> torch.Tensor:
        """Eq. 10-11: shared W·x + b (zero-padding the narrower tower), then L2 normalisation (``model.normalize``)."""
        if self.projection is not None:
            if pooled.shape[-1] < self.hidden_dim:
                pooled = F.pad(pooled, (0, self.hidden_dim - pooled.shape[-1]))
            pooled = self.projection(pooled)
        return F.normalize(pooled, dim=-1) if self.normalize else pooled

    def encode_tokens(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, tower: str) -> Encoded:
        """The tower's final vectors of these token ids (pooled, projected, normalised; an inherited document's from
        the teacher).

        Args:
            input_ids: (n, length) token ids.
            attention_mask: (n, length), 1 at attended positions.
            tower: ``query`` or ``document``.

        Returns:
            ``Encoded`` (n, dim) vectors.
        """
        if tower == "document" and self.document_teacher is not None:
            return Encoded(self.document_teacher.documents(input_ids, attention_mask))
        return Encoded(self.project(self.pooled(input_ids, attention_mask, tower)))

    def represent(self, hidden, input_ids, attention_mask, tower) -> Encoded:  # encode_tokens() does it all
        return Encoded(self.project(self._pool(hidden, attention_mask)))

    def score(self, q: Encoded, d: Encoded) -> torch.Tensor:
        return self.score_scale * (q.vectors * d.vectors).sum(-1)

    def score_matrix(self, q: Encoded, d: Encoded) -> torch.Tensor:
        return self.score_scale * q.vectors @ d.vectors.T

    # ------------------------------------------------------------ training rows
    def forward(self, q_input_ids: torch.Tensor, q_attention_mask: torch.Tensor, d_input_ids: torch.Tensor,
                d_attention_mask: torch.Tensor, q_index: torch.Tensor | None = None, d_index: torch.Tensor | None = None,
                group_size: int | None = None, all_pairs: bool = False) -> torch.Tensor:
        """Without ``group_size``: one score per pair (as every ranker), or with ``all_pairs`` the (distinct
        queries, distinct documents) score matrix. With ``group_size``: contrastive rows (see module doc)."""
        if group_size is None:
            return super().forward(q_input_ids, q_attention_mask, d_input_ids, d_attention_mask, q_index, d_index, all_pairs)
        q = self.encode_tokens(q_input_ids, q_attention_mask, "query").vectors
        d = self.encode_tokens(d_input_ids, d_attention_mask, "document").vectors
        group = int(group_size)
        if world_size() > 1:  # accelerate launch --num_processes N: every process's documents are negatives
            rows, positive_keys, self.loss_weight = gathered_in_batch_rows(
                q, d, q_index, d_index, group, self.score_scale, row_keys(q_input_ids, q_attention_mask),
                row_keys(d_input_ids, d_attention_mask))
        else:
            rows = in_batch_rows(q, d, q_index, d_index, group, self.score_scale)
            positive_keys = None
            self.loss_weight = 1.0
        if self.negative_cache is not None:
            item_q = q[group_items(q_index, d_index, group)[0]]
            if positive_keys is None:
                positive_keys = _positive_keys(d_input_ids, d_attention_mask, q_index, d_index, group)
            rows = torch.cat([rows, self.negative_cache.negative_scores(item_q, positive_keys, self.score_scale)], dim=1)
        # |D^-| per item, for the collapse value log(1 + |D^-|) (000 Eq. 7)
        self.last_num_negatives = float(torch.isfinite(rows[:, 1:]).sum(1).float().mean())
        return rows


def _linear_dense(modules):
    """The one sentence-level linear Dense module of a SentenceTransformer's modules, or None."""
    dense = [d for d in modules.dense if not d.token_level] if modules is not None else []
    return dense[0] if len(dense) == 1 and dense[0].linear else None


def _positive_keys(d_input_ids, d_attention_mask, q_index, d_index, group: int) -> list[set[bytes]]:
    """For each item, the keys of every positive of its query in the batch (never drawn as its negatives)."""
    keys = row_keys(d_input_ids, d_attention_mask)
    item_q, item_pos = (t.tolist() for t in group_items(q_index, d_index, group))
    by_query: dict[int, set[bytes]] = {}
    for qi, pi in zip(item_q, item_pos):
        by_query.setdefault(qi, set()).add(keys[pi])
    return [by_query[qi] for qi in item_q]


def in_batch_rows(q: torch.Tensor, d: torch.Tensor, q_index: torch.Tensor, d_index: torch.Tensor, group: int,
                  scale: float) -> torch.Tensor:
    """(items, 1 + documents) scores: column 0 the item's positive, then every document of the batch, where the
    positive itself and the other positives of the same query are -inf (excluded from Eq. 5's denominator)."""
    item_q, item_pos = group_items(q_index, d_index, group)
    scores = scale * q[item_q] @ d.T  # (items, documents)
    positive = scores.gather(1, item_pos.unsqueeze(1))
    excluded = query_positives(item_q, item_pos, d.shape[0])
    return torch.cat([positive, scores.masked_fill(excluded, float("-inf"))], dim=1)


def gathered_in_batch_rows(q: torch.Tensor, d: torch.Tensor, q_index: torch.Tensor, d_index: torch.Tensor, group: int,
                           scale: float, q_keys: list[bytes],
                           d_keys: list[bytes]) -> tuple[torch.Tensor, list[set[bytes]], float]:
    """``in_batch_rows`` over the global batch of several processes: this process's items scored against the
    documents of every process (gathered with gradient). Returns (rows, the positive keys of each local item's
    query across all processes, loss weight).

    The rows equal those the items would get in one process holding the whole batch (the concatenation of the
    processes' batches in rank order): the same document in two processes' batches counts once (later copies are
    -inf), a query's positives in any process are excluded from its negatives (queries and documents identified by
    their token ids, ``row_keys``), and each item's hard negatives stay its own (they are documents of its
    process's batch, in the gathered columns like every other document). Loss weight: local items × processes /
    global items, so that DDP's average over processes of the weighted per-process mean is the mean over the
    global batch even when processes hold different item counts."""
    item_q, item_pos = group_items(q_index, d_index, group)
    d_all, offsets = gather_rows(d)
    local_items = [(q_keys[qi], d_keys[pi]) for qi, pi in zip(item_q.tolist(), item_pos.tolist())]
    gathered = gather_objects((d_keys, local_items))
    first_column: dict[bytes, int] = {}
    duplicates: list[int] = []
    for column, key in enumerate(k for keys, _ in gathered for k in keys):
        if key in first_column:
            duplicates.append(column)
        else:
            first_column[key] = column
    positives_of: dict[bytes, set[bytes]] = {}
    for _, items in gathered:
        for query_key, positive_key in items:
            positives_of.setdefault(query_key, set()).add(positive_key)
    excluded = torch.zeros(len(local_items), d_all.shape[0], dtype=torch.bool)
    excluded[:, duplicates] = True
    for i, (query_key, _) in enumerate(local_items):
        excluded[i, [first_column[k] for k in positives_of[query_key]]] = True
    scores = scale * q[item_q] @ d_all.T
    positive = scores.gather(1, (item_pos + offsets[rank()]).unsqueeze(1))
    rows = torch.cat([positive, scores.masked_fill(excluded.to(scores.device), float("-inf"))], dim=1)
    global_items = sum(len(items) for _, items in gathered)
    weight = len(local_items) * world_size() / global_items
    return rows, [positives_of[query_key] for query_key, _ in local_items], weight


__all__ = ["DenseDualEncoder", "gathered_in_batch_rows", "in_batch_rows", "row_keys"]

"""What every ranker shares: a ``Backbone`` (+ adapter), its tokenizer, ranker-specific modules, save/load.

A saved ranker is a folder:
    ssft_model.json      architecture, base model, method and its options, lengths
    tokenizer files
    adapter/             PEFT adapter (PEFT format: loads with peft.PeftModel.from_pretrained), or
    backbone/            the full fine-tuned transformers model (neither folder: frozen base, loaded by name)
    hidden_prefix.json   001's prefix (an ssft module): its config ...
    hidden_prefix.safetensors   ... and weights
    ranker.safetensors   the ranker's own modules (head, projections)
"""
from __future__ import annotations

import copy
import dataclasses
import json
import os
import re
import shutil
import tempfile
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import AutoModel, AutoTokenizer
from transformers.utils import logging as hf_logging

from ssft.adapters.backbone import Backbone, select_layers
from ssft.adapters.hidden_prefix import build_hidden_prefix
from ssft.adapters.loading import PICKLE_WEIGHTS, load_peft_adapter, refuse_pickle_weights
from ssft.config.model import NoModelOptions
from ssft.config.parse import field_names, parse_dataclass
from ssft.config.registry import ADAPTERS, MODELS
from ssft.core.arguments import text, texts, whole_number
from ssft.core.errors import SsftError
from ssft.core.hub import (
    check_layer_count,
    check_tokenizer_files,
    read_json_file,
    refuse_foreign_vocabulary,
    resolve_model,
    weights_header,
)
from ssft.core.io import replace_folder
from ssft.core.paths import SPEC_FILE
from ssft.core.precision import inference, model_precision, parse_served, served_as
from ssft.data.tokens import TokenCache
from ssft.models.batching import check_flag, inference_progress, length_batches, pair_lengths_of
from ssft.models.interop.checkpoint import (
    Pretrained,
    account_weights,
    check_weight_shapes,
    read_checkpoint,
    read_weights,
)

__all__ = ["LOAD_ERRORS", "PICKLE_WEIGHTS", "SPEC_FILE", "Pretrained", "Ranker", "check_model_folder", "load_backbone",
           "load_hidden_prefix", "load_peft_adapter", "load_pretrained", "load_ranker", "load_transformer",
           "refuse_other_tokenizer", "refuse_pickle_weights", "refuse_two_towers", "remove_stale_save_folders",
           "save_backbone", "saved_model_folder"]


def saved_model_folder(name: str | Path) -> Path | None:
    """The saved ssft model folder ``name`` points to (the folder itself or a run folder's ``model/``), or None
    (e.g. for a hub name)."""
    path = Path(name)
    for folder in (path, path / "model"):
        if (folder / SPEC_FILE).is_file():
            return folder
    return None


# what loading a damaged model folder raises (truncated safetensors, bad JSON, missing files, wrong shapes)
LOAD_ERRORS = (OSError, ValueError, RuntimeError, KeyError, EnvironmentError, SafetensorError, json.JSONDecodeError)
PREFIX_CONFIG = "hidden_prefix.json"
PREFIX_WEIGHTS = "hidden_prefix.safetensors"


def load_hidden_prefix(path: Path) -> nn.Module:
    """The saved hidden prefix of a ranker folder, weights checked against its config."""
    try:
        config = json.loads((path / PREFIX_CONFIG).read_text())
    except json.JSONDecodeError as err:
        raise SsftError(f"{path / PREFIX_CONFIG}: invalid JSON: {err.msg}") from None
    prefix = build_hidden_prefix(config)
    if not (path / PREFIX_WEIGHTS).is_file():
        raise SsftError(f"{path}: missing {PREFIX_WEIGHTS}")
    try:
        prefix.load_state_dict(load_file(path / PREFIX_WEIGHTS), strict=True)
    except SafetensorError as err:
        raise SsftError(f"{path / PREFIX_WEIGHTS}: unreadable safetensors file ({_first_line(err)})") from None
    except RuntimeError as err:
        raise SsftError(f"{path / PREFIX_WEIGHTS}: does not match {PREFIX_CONFIG}: {str(err).splitlines()[0]}") from None
    return prefix


def check_model_folder(folder: Path, name: str, trust_remote_code: bool = False, tokenizer: bool = True) -> None:
    """What a transformers folder's files tell before any weight is read, each a one-line SsftError: its config.json
    describes the weights beside it (the layer count from the safetensors header first, so an absurd count is refused
    before anything is built; then every tensor's shape) and, with ``tokenizer``, it has tokenizer files covering the
    model's vocabulary. What ``ssft-train --check`` reports and what loading refuses are the same."""
    folder = Path(folder)
    config = read_json_file(folder / "config.json")
    header = weights_header(folder)
    check_layer_count(folder, config if isinstance(config, dict) else None, header)
    check_weight_shapes(folder, trust_remote_code, header)
    if tokenizer:
        check_tokenizer_files(folder, name, config.get("vocab_size") if isinstance(config, dict) else None)


def refuse_other_tokenizer(tokenizer, model: nn.Module, name: str, folder: Path) -> None:
    """SsftError when ``tokenizer`` (loaded from ``folder``) does not fit ``model``'s token embeddings: far fewer
    tokens (transformers builds a stub of special tokens from a folder without tokenizer files: every word [UNK]) or ids
    past them (``ssft.core.hub.refuse_foreign_vocabulary``)."""
    try:
        embeddings = model.get_input_embeddings().num_embeddings
    except (AttributeError, NotImplementedError):  # a model without one token embedding matrix
        return
    refuse_foreign_vocabulary(len(tokenizer), embeddings, name, folder)


def load_pretrained(name: str, trust_remote_code: bool = False, route: str = "query"):
    """(model, tokenizer, ``Pretrained``) from a hub id or folder, resolved offline where possible. The model is the
    plain encoder (no pooler: a ranker that uses one takes its weights from the checkpoint); ``Pretrained`` says what
    kind of checkpoint it is and holds every weight the encoder did not take (``ssft.models.interop.checkpoint``).
    transformers' own load report is replaced by ``Pretrained.report``, which the caller issues once the ranker has
    taken what it uses: it lists every checkpoint weight left unused and every weight initialised at random.
    ``route``: which tower of a sentence-transformers Router folder (``query``, the default, or ``document``);
    ignored for any other checkpoint."""
    path = Path(resolve_model(name))
    refuse_pickle_weights(path)
    pretrained = read_checkpoint(name, path, route)
    source = path / pretrained.modules.transformer_path if pretrained.modules and pretrained.modules.transformer_path else path
    refuse_pickle_weights(source)
    check_model_folder(source, name, trust_remote_code)
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # its report is Pretrained.report's, which knows what the ranker uses
    try:
        # float32 whatever the checkpoint was saved in (transformers 5 keeps a float16 / bfloat16 checkpoint's dtype,
        # which the ranker's float32 modules cannot take); bf16 inference and training cast from there
        try:
            model = AutoModel.from_pretrained(source, add_pooling_layer=False, trust_remote_code=trust_remote_code,
                                              dtype=torch.float32)
        except TypeError:  # architectures without a pooler argument
            model = AutoModel.from_pretrained(source, trust_remote_code=trust_remote_code, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code)
    except LOAD_ERRORS as err:  # corrupt or truncated weights, a config.json that is not JSON, no tokenizer files
        raise SsftError(f"model '{name}' at {path} could not be loaded: {_first_line(err)}") from None
    finally:
        hf_logging.set_verbosity(verbosity)
    refuse_other_tokenizer(tokenizer, model, name, source)
    account_weights(pretrained, read_weights(source), model.state_dict())
    if pretrained.kind == "colbert-stanford" and pretrained.colbert is not None:
        pretrained.colbert.projection = pretrained.extra.get("linear.weight")
    return model, tokenizer, pretrained


def load_transformer(name: str, trust_remote_code: bool = False, report: bool = True, route: str | None = None):
    """(model, tokenizer) from a hub id or folder (``load_pretrained``); ``report``: warn about the checkpoint's
    weights nobody uses (a caller that uses none of them beyond the encoder, e.g. a teacher's encoder). ``route``: the
    tower of a sentence-transformers Router folder; None (one encoder wanted) refuses a Router with two towers."""
    model, tokenizer, pretrained = load_pretrained(name, trust_remote_code, route or "query")
    if route is None:
        refuse_two_towers(pretrained, "a single encoder (e.g. a cross-encoder teacher)")
    if report:
        pretrained.report()
    return model, tokenizer


def refuse_two_towers(pretrained: Pretrained, what: str) -> None:
    """A sentence-transformers Router with two different towers is one line of refusal for ``what`` (e.g. "a twin
    model"), which has one encoder (only ``dense`` holds a query and a document tower)."""
    if pretrained.two_towers:
        towers = pretrained.modules.towers
        raise SsftError(f"model '{pretrained.name}' is a sentence-transformers Router with two different towers (query "
                        f"route {towers['query']}, document route {towers['document']}); {what} has one encoder: only "
                        f"architecture dense takes both (model.name = the Router)")


def _first_line(err: BaseException) -> str:
    """The first line of an error's text, short enough for a one-line message. torch's refusal to unpickle
    anything but weights ends up here too: its advice (load the file with ``weights_only=False``, i.e. run
    whatever it holds) is never passed on."""
    text = str(err).strip()
    if type(err).__name__ == "UnpicklingError" or "weights_only" in text or "Weights only load failed" in text:
        return "pickle data that is not plain weights (refused)"
    return text.splitlines()[0] if text else type(err).__name__


def save_backbone(backbone: Backbone, folder: Path, base_model: str, frozen_base: bool) -> None:
    """One backbone into ``folder``: ``adapter/`` (PEFT format) or ``backbone/`` (full weights) or nothing (a
    frozen base, loaded by name), plus the hidden prefix files when it has one."""
    if backbone.is_peft:
        for peft_config in backbone.model.peft_config.values():
            peft_config.base_model_name_or_path = base_model
        with warnings.catch_warnings():  # PEFT looks the base model up on the hub to check the vocabulary
            warnings.filterwarnings("ignore", message="Could not find a config file")
            backbone.model.save_pretrained(folder / "adapter")
    elif not frozen_base:
        backbone.base_model.save_pretrained(folder / "backbone")
    if backbone.hidden_prefix is not None:
        prefix = backbone.hidden_prefix
        (folder / PREFIX_CONFIG).write_text(json.dumps(prefix.config_dict(), indent=2) + "\n")
        save_file({k: v.detach().contiguous() for k, v in prefix.state_dict().items()}, folder / PREFIX_WEIGHTS)


def load_backbone(path: Path, method: str, base_model: str, trust: bool, spec: dict[str, Any],
                  layers: int | list[int] | None = None, route: str = "query") -> Backbone:
    """Inverse of ``save_backbone``: the backbone saved in ``path`` on top of ``base_model`` (its ``route`` when that
    is a sentence-transformers Router folder). ``layers``: the layer subset the saved backbone was built on
    (``select_layers``), re-applied to a base loaded by name before its adapter (a saved ``backbone/`` already holds
    only those layers). ``trust``: the user's trust_remote_code (never the saved spec's)."""
    def base() -> nn.Module:
        # its head weights are in ranker.safetensors
        transformer, _ = load_transformer(base_model, trust, report=False, route=route)
        if layers is not None:
            select_layers(transformer, layers, base_model, f"{path}/{SPEC_FILE}: query_layers")
        return transformer

    adapter_cls = ADAPTERS.get(method) if method in ADAPTERS else None
    if adapter_cls is not None and hasattr(adapter_cls, "load_backbone"):  # e.g. several named PEFT adapters
        backbone = adapter_cls.load_backbone(base(), path, spec)
    elif (path / "adapter").is_dir():
        refuse_pickle_weights(path / "adapter")  # before the base model is loaded
        backbone = Backbone(load_peft_adapter(base(), path / "adapter", base_model), method)
    elif (path / "backbone").is_dir():
        refuse_pickle_weights(path / "backbone")
        check_model_folder(path / "backbone", str(path), trust, tokenizer=False)  # the tokenizer is the ranker folder's
        try:
            transformer = AutoModel.from_pretrained(path / "backbone", add_pooling_layer=False, trust_remote_code=trust,
                                                    dtype=torch.float32)
        except TypeError:
            transformer = AutoModel.from_pretrained(path / "backbone", trust_remote_code=trust, dtype=torch.float32)
        backbone = Backbone(transformer, method)
    elif Ranker._frozen_base_method(method):
        transformer = base()
        for p in transformer.parameters():
            p.requires_grad_(False)
        backbone = Backbone(transformer, method)
    else:
        raise SsftError(f"{path}: no adapter/ or backbone/ folder")
    if (path / PREFIX_CONFIG).is_file():
        backbone.hidden_prefix = load_hidden_prefix(path)
    return backbone


def remove_stale_save_folders(path: Path) -> None:
    """Clean up after an earlier ``Ranker.save`` of ``path`` that was killed: its temporary folders
    (``.<name>.<mkdtemp suffix>``) and ``.<name>.old``. Killed between its two renames, that save left no
    ``path`` but the previous complete folder as ``.<name>.old``: that one is put back first."""
    path = Path(path)
    if not path.parent.is_dir():
        return
    old = path.with_name(f".{path.name}.old")
    if old.is_dir() and not old.is_symlink() and not path.exists() and (old / SPEC_FILE).is_file():
        os.replace(old, path)
    pattern = re.compile(re.escape(f".{path.name}.") + r"(old|[a-z0-9_]{8})")
    for stale in path.parent.iterdir():
        if pattern.fullmatch(stale.name) and stale.is_dir() and not stale.is_symlink():
            shutil.rmtree(stale, ignore_errors=True)


class Ranker(nn.Module):
    """Base class. Subclasses set ``architecture`` (their registry name) and define ``forward`` and their ranker
    modules; the capability flags below say what other components may rely on (the recipe, the trainer and the
    pipeline read them, never architecture names)."""

    architecture = ""
    # the model keys the architecture reads beyond the common ones (ssft.config.model): a dataclass, parsed from the
    # recipe's model section (ModelConfig.config) or from a saved spec (config_from_spec); kept in the spec
    Config: type = NoModelOptions
    # Config keys that folders saved before the key existed lack, with what those folders mean (not the new default)
    legacy_spec: dict[str, Any] = {}
    backbone_prefixes: tuple[str, ...] = ("backbone.",)  # state-dict prefixes saved with the backbone, not the head
    bi_encoder: bool = False  # encodes queries and documents separately (towers; a semi-Siamese adapter fits)
    full_retrieval: bool = False  # evaluated by retrieval over the whole corpus (ssft.eval.retrieve), not reranking
    in_batch_negatives: bool = False  # training rows from forward(..., group_size=g): every document of the batch
    cache_document_embeddings: bool = False  # a frozen model's document representations go to the on-disk cache
    distillation_student: bool = False  # can be the student of a recipe's distillation section (a dense teacher)
    # model.head values whose ranker carries a token-reconstruction head (loss.reconstruction_weight, 004 §4.2):
    # ``keeping_token_states()`` and ``reconstruction_logits(states)``
    reconstruction_heads: tuple[str, ...] = ()
    # the model as built ranks before any training (no freshly initialised, random scoring head): ssft-train scores it
    # on the test split as the run's 'start' entry; a subclass whose head may be random overrides it
    ranks_untrained: bool = True
    # what a serving runtime hands back of the last layer (ssft.models.interop.openvino): every token's state, or only
    # the first token's where the ranker reads nothing else (a converted graph returning less runs faster)
    serves_first_token_only: bool = False
    # the transformer layers (0 the first, -1 the last; "all": every one) in which OpenVINO int8 keeps attention's
    # query and key projections in float (ssft.models.interop.openvino.quantize): where one pair's joint encoding
    # gives its score, their rounding reorders candidates most
    int8_float_attention_layers: tuple[int, ...] | Literal["all"] = ()
    # OpenVINO int8 checks its own scores against float on a few whole queries of the pairs served, and serves float
    # where they moved too far (ssft.models.interop.openvino.int8_check): where a ranker's scores are that sensitive
    int8_checks_scores: bool = False

    @classmethod
    def ranks_untrained_for(cls, config: Any) -> bool | None:
        """Whether a model of this class built from ``config`` ranks before training, known before it is built
        (``--check``, the run's plan).

        Args:
            config: the recipe's ``model.config`` (the class's typed ``Config``).

        Returns:
            True or False; None where it is known only once the checkpoint is loaded.
        """
        return cls.ranks_untrained

    def __init__(self, backbone: Backbone, tokenizer, spec: dict[str, Any]):
        super().__init__()
        self.backbone = backbone
        self.tokenizer = tokenizer
        self.spec = spec
        self.arch_config = self.config_from_spec(spec)  # the architecture's typed Config (what its code reads)
        self.max_length, self.query_max_length = int(spec["max_length"]), int(spec["query_max_length"])

    def zero_start_parameters(self) -> list[nn.Parameter]:
        """The ranker's own parameters (outside the backbone's adapter) that start at exactly zero in every model it
        builds, whatever the seed: with the adapter's update zeroed too they give back the start, and a fraction of
        the trained update (``adapter.delta_scale``) scales them by the same fraction.

        Returns:
            Those parameters; the base class has none (a head that starts random or fitted is not one).
        """
        return []

    def serving_pooler(self) -> nn.Module | None:
        """With ``serves_first_token_only``: a module the serving runtime may run on the first token's state inside
        its graph, (n, hidden) → (n, hidden'), whose output the ranker's forward finishes (``Backbone.serves_pooled``);
        None: the state itself comes back. The last linear layer stays out of the graph: run there at bf16 / int8 it
        rounded the scores and moved nDCG@10 by 0.002.

        Returns:
            The module to run in the serving graph, or None (the base class: the first token's state comes back).
        """
        return None

    def token_cache(self, tokenizer=None):
        """The ``TokenCache`` of ``tokenizer`` (default: the ranker's): each distinct text tokenised once.

        Args:
            tokenizer: the tokenizer whose cache is wanted (e.g. a dense model's document tokenizer); None: the
                ranker's own.

        Returns:
            The cache, made on first use and kept on the ranker (outside its state dict), one per tokenizer.
        """
        tokenizer = tokenizer if tokenizer is not None else self.tokenizer
        caches = self.__dict__.setdefault("_token_caches", {})  # plain attribute: never in the state dict
        if id(tokenizer) not in caches:
            caches[id(tokenizer)] = TokenCache(tokenizer, max(self.max_length, self.query_max_length))
        return caches[id(tokenizer)]

    # ------------------------------------------------------------ building
    @classmethod
    def build(cls, model_cfg, method: str, options: dict[str, Any], config: Any = None) -> Ranker:
        """A new ranker: ``model_cfg`` (a ``ModelConfig``) with the fine-tuning method ``method``. ``options`` are
        the method's options as the recipe gives them (kept in the spec); ``config`` their typed config when already
        parsed (``recipe.adapter.config``), else they are parsed here.

        Args:
            model_cfg: the recipe's model section (a ``ModelConfig``): the base model's hub id or folder, the lengths,
                trust_remote_code and the architecture's typed config.
            method: the fine-tuning method's registry name (e.g. ``lora``, ``full``).
            options: the method's options as the recipe gives them.
            config: the method's typed options, already parsed; None parses ``options``.

        Returns:
            The new ranker: the method applied to the base model, with the checkpoint's weights it uses beyond the
            encoder (``adopt_pretrained``); the checkpoint's unused weights are reported.
        """
        adapter = ADAPTERS.get(method)
        if config is None:
            config = adapter.config_from(options)
        transformer, tokenizer, pretrained = load_pretrained(model_cfg.name, model_cfg.trust_remote_code)
        refuse_two_towers(pretrained, f"a {cls.architecture} model")
        for p in transformer.parameters():
            p.requires_grad_(False)
        backbone = adapter.apply(transformer, config)
        arch_config = copy.deepcopy(model_cfg.config)
        spec = cls.build_spec(model_cfg, method, options, arch_config)
        cls.spec_from_pretrained(spec, arch_config, pretrained)
        spec.update(cls.spec_of(arch_config))
        ranker = cls(backbone, tokenizer, spec)
        ranker.adopt_pretrained(pretrained)
        pretrained.report(ranker.quiet_unused(pretrained))
        return ranker

    # ------------------------------------------------------------ a pretrained checkpoint's own modules
    @classmethod
    def spec_from_pretrained(cls, spec: dict[str, Any], config: Any, pretrained: Pretrained) -> None:
        """Hook: settings of the checkpoint (``ssft.models.interop.checkpoint``) the new ranker keeps before it is
        built: into ``config`` (its typed ``Config``, e.g. a SentenceTransformer's Normalize module deciding
        ``normalize: null``) or into the spec (a ColBERT checkpoint's markers, a SentenceTransformer's prompts).

        Args:
            spec: the new ranker's spec (``build_spec``'s), updated in place.
            config: the new ranker's typed ``Config``, updated in place.
            pretrained: the loaded checkpoint (``load_pretrained``): its kind, its sentence-transformers modules and
                the weights the encoder did not take.
        """

    def fit_start(self, documents: Sequence[str], seed: int = 0) -> str | None:
        """Fit what the ranker's start needs from the corpus (``documents``, sampled with ``seed``), before training;
        a note of what was fitted, or None. Most rankers start from the checkpoint alone; ColBERT fits a narrower
        projection to the corpus's token states.

        Args:
            documents: the corpus's document texts (read by position: only the sample is read).
            seed: the seed of the sample drawn from ``documents``.

        Returns:
            A one-line note of what was fitted (logged before training), or None when nothing was.
        """
        return None

    def adopt_pretrained(self, pretrained: Pretrained) -> None:
        """Hook: take the checkpoint's weights this ranker uses beyond the encoder (``Pretrained.take``: a
        classifier head, a projection); whatever is left is reported as unused.

        Args:
            pretrained: the checkpoint the ranker was built from (``load_pretrained``); the weights taken are removed
                from it.
        """

    def graph_refusal(self) -> str | None:
        """Hook: why this ranker's encoder cannot run as a plain transformer forward, the graph another runtime serves
        (``ssft.models.interop.openvino``; one line naming what serves it), or None.

        Returns:
            The reason, one line; None when a plain forward computes what the ranker reads (the base class).
        """
        return None

    def export_refusal(self) -> str | None:
        """Hook: why this ranker's own modules have no standard format (one line naming what serves it), or None
        (``ssft.models.interop.export``; the method's refusal is checked there, from ``Adapter.exportable``).

        Returns:
            The reason, one line; None when the ranker's own modules export (the base class).
        """
        return None

    def quiet_unused(self, pretrained: Pretrained) -> tuple[str, ...]:
        """Checkpoint weight names (without the task model's prefix) legitimately unused by this ranker: BERT's
        next-sentence pooler beside a plain encoder; a fine-tuned sequence-classification pooler is never quiet.

        Args:
            pretrained: the checkpoint the ranker was built from (``load_pretrained``).

        Returns:
            Name prefixes that ``Pretrained.report`` leaves out of its list of unused weights.
        """
        if pretrained.kind == "sequence-classification":
            return ("embeddings.position_ids",)
        return ("pooler.", "embeddings.position_ids")

    @classmethod
    def build_spec(cls, model_cfg, method: str, options: dict[str, Any], config: Any = None) -> dict[str, Any]:
        """What ``ssft_model.json`` records of a built ranker: enough to load it back. ``config``: the architecture's
        typed config (default ``model_cfg.config``).

        Args:
            model_cfg: the recipe's model section (a ``ModelConfig``).
            method: the fine-tuning method's registry name.
            options: the method's options as the recipe gives them.
            config: the architecture's typed config; None: ``model_cfg.config``.

        Returns:
            The spec: architecture, base model, method and its options, lengths, trust_remote_code and the keys of
            ``config`` (``spec_of``).
        """
        return {
            "architecture": cls.architecture,
            "base_model": model_cfg.name,
            "method": method,
            "options": dict(options),
            "max_length": model_cfg.max_length,
            "query_max_length": model_cfg.query_max_length,
            "trust_remote_code": model_cfg.trust_remote_code,
            **cls.spec_of(model_cfg.config if config is None else config),
        }

    @classmethod
    def spec_of(cls, config: Any) -> dict[str, Any]:
        """The spec keys of the architecture's typed config (what ``ssft_model.json`` records of it).

        Args:
            config: the architecture's typed ``Config``.

        Returns:
            Key → value (an architecture may leave out keys its settings do not read).
        """
        return dataclasses.asdict(config)

    @classmethod
    def config_from_spec(cls, spec: dict[str, Any], where: str = "model") -> Any:
        """The architecture's typed config of a spec (a saved folder's ``ssft_model.json``, or one being built):
        its ``Config`` keys, types and values checked; a key a folder saved before it existed lacks means what
        ``legacy_spec`` says; any other missing key is the default.

        Args:
            spec: the spec (its keys beyond the architecture's ``Config`` are ignored).
            where: what an error message starts with (e.g. the spec file's path and section).

        Returns:
            An instance of the architecture's ``Config``.
        """
        saved = {key: spec[key] for key in field_names(cls.Config) if key in spec}
        return parse_dataclass(cls.Config, {**cls.legacy_spec, **saved}, where)

    @classmethod
    def carries_reconstruction_head(cls, config: Any) -> bool:
        """Whether a ranker of this typed config carries a token-reconstruction head (``reconstruction_heads``).

        Args:
            config: the architecture's typed ``Config`` (e.g. the recipe's ``model.config``).

        Returns:
            True when its ``head`` is one of ``reconstruction_heads``; always False for the base class.
        """
        return False

    def ranker_state(self) -> dict[str, torch.Tensor]:
        """Parameters and buffers outside the backbone(s) (heads, projections).

        Returns:
            State-dict name → detached, contiguous tensor: what ``save`` writes to ``ranker.safetensors``.
        """
        return {k: v.detach().contiguous() for k, v in self.state_dict().items() if not k.startswith(self.backbone_prefixes)}

    def head_parameters(self) -> list[nn.Parameter]:
        """The ranker's own parameters: every one outside the backbone(s) (heads, projections), the ones
        ``model.head_learning_rate`` applies to.

        Returns:
            The parameters, trainable or not, in ``named_parameters`` order.
        """
        return [p for n, p in self.named_parameters() if not n.startswith(self.backbone_prefixes)]

    # ------------------------------------------------------------ save / load
    def save(self, path: str | Path) -> None:
        """Write the ranker folder atomically: complete, or the previous one left in place. The folder and its
        files get the modes the umask gives (not ``mkdtemp``'s 0700 / safetensors' 0600); the temporary folders
        an earlier save of the same folder left when it was killed are removed.

        Args:
            path: the folder to write (replaced when it exists); its parent is created when missing.
        """
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_save_folders(path)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
        try:
            (tmp / SPEC_FILE).write_text(json.dumps(self.spec, indent=2) + "\n")
            self.tokenizer.save_pretrained(tmp)
            save_backbone(self.backbone, tmp, self.spec["base_model"], self._frozen_base())
            self._save_extra(tmp)
            save_file(self.ranker_state(), tmp / "ranker.safetensors")
            replace_folder(tmp, path)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    def _save_extra(self, folder: Path) -> None:
        """Hook: rankers with more than one backbone write the others here (inside the atomic folder)."""

    @staticmethod
    def read_spec(path: str | Path) -> dict[str, Any]:
        """The spec (``ssft_model.json``) of a saved ranker folder; an SsftError when the folder has none or it is
        not a JSON object naming the architecture, the base model and the method.

        Args:
            path: the saved ranker folder.

        Returns:
            The spec as saved.
        """
        path = Path(path)
        spec_file = path / SPEC_FILE
        if not spec_file.is_file():
            raise SsftError(f"{path}: not a saved ssft model (no {SPEC_FILE})")
        try:
            spec = json.loads(spec_file.read_text(encoding="utf-8"))
        except json.JSONDecodeError as err:
            raise SsftError(f"{spec_file}: invalid JSON: {err.msg}") from None
        except UnicodeDecodeError:
            raise SsftError(f"{spec_file}: not a UTF-8 text file") from None
        if not isinstance(spec, dict) or not all(isinstance(spec.get(k), str) for k in ("architecture", "base_model", "method")):
            raise SsftError(f"{spec_file}: expected an object with 'architecture', 'base_model' and 'method' names")
        return spec

    @classmethod
    def load(cls, path: str | Path, trust_remote_code: bool = False) -> Ranker:
        """The ranker saved in ``path``; a damaged folder is an SsftError naming it. ``trust_remote_code`` is the
        user's permission to run Python code the model ships: a folder saved with trust_remote_code is refused
        without it (the folder's own spec never grants it).

        Args:
            path: the saved ranker folder.
            trust_remote_code: the user's permission to run code the model ships.

        Returns:
            The ranker, in eval mode with every parameter frozen.
        """
        try:
            return cls._load(Path(path), trust_remote_code=trust_remote_code)
        except SsftError:
            raise
        except LOAD_ERRORS as err:
            raise SsftError(f"{path}: the saved model cannot be loaded ({type(err).__name__}: {_first_line(err)})") from None

    @staticmethod
    def check_trust(path: Path, spec: dict[str, Any], trust_remote_code: bool) -> None:
        """Refuse a folder whose spec says it needs trust_remote_code unless the user passed it.

        Args:
            path: the saved ranker folder (named in the error).
            spec: its spec (``read_spec``).
            trust_remote_code: the user's permission to run code the model ships.
        """
        if spec.get("trust_remote_code") not in (None, False) and not trust_remote_code:
            raise SsftError(f"{Path(path) / SPEC_FILE}: this model was saved with trust_remote_code; pass "
                            f"--trust-remote-code (or trust_remote_code=True) if you trust its code")

    @classmethod
    def _load(cls, path: Path, trust_remote_code: bool = False) -> Ranker:
        path = Path(path)
        spec = cls.read_spec(path)
        cls.check_trust(path, spec, trust_remote_code)
        trust = bool(trust_remote_code)
        layers = getattr(cls.config_from_spec(spec, f"{path}/{SPEC_FILE}: model"), "query_layers", None)
        backbone = load_backbone(path, spec["method"], spec["base_model"], trust, spec, layers=layers)
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust)
        refuse_other_tokenizer(tokenizer, backbone.base_model, str(path), path)
        ranker = cls.from_loaded(path, backbone, tokenizer, spec, trust_remote_code=trust)
        state_file = path / "ranker.safetensors"
        if not state_file.is_file():
            raise SsftError(f"{path}: missing ranker.safetensors")
        missing, unexpected = ranker.load_state_dict(load_file(state_file), strict=False)
        missing = [k for k in missing if not k.startswith(cls.backbone_prefixes)]
        if missing or unexpected:
            raise SsftError(f"{state_file}: does not match a '{spec['architecture']}' ranker (missing {missing}, "
                            f"unexpected {unexpected})")
        for p in ranker.parameters():
            p.requires_grad_(False)
        return ranker.eval()

    def load_weights(self, path: str | Path) -> None:
        """Copy the weights of the saved ranker folder ``path`` into this ranker (same architecture and method),
        in place: what a checkpoint resume needs, with the optimizer still pointing at these parameters.

        Args:
            path: the saved ranker folder; it is loaded with this ranker's own trust_remote_code.
        """
        path = Path(path)
        spec = self.read_spec(path)
        for key in ("architecture", "method"):
            if spec.get(key) != self.spec.get(key):
                raise SsftError(f"{path}: a '{spec.get(key)}' {key}, this model's is '{self.spec.get(key)}'")
        # a checkpoint of this very run: the running model's own trust_remote_code (the user's recipe) applies
        source = type(self).load(path, trust_remote_code=bool(self.spec.get("trust_remote_code", False))).state_dict()
        target = self.state_dict()
        missing = [k for k in target if k not in source]
        wrong = [k for k in target if k in source and source[k].shape != target[k].shape]
        if missing or wrong:
            raise SsftError(f"{path}: does not match this model (missing {missing[:3]}, other shape {wrong[:3]})")
        with torch.no_grad():
            for key, tensor in target.items():
                tensor.copy_(source[key])

    @classmethod
    def from_loaded(cls, path: Path, backbone: Backbone, tokenizer, spec: dict[str, Any],
                    trust_remote_code: bool = False) -> Ranker:
        """Hook: the ranker around a loaded backbone (rankers with more than one backbone load the others, with
        the user's ``trust_remote_code``).

        Args:
            path: the saved ranker folder (the other backbones' folders are inside it).
            backbone: the loaded (first) backbone.
            tokenizer: the folder's tokenizer.
            spec: the folder's spec (``read_spec``).
            trust_remote_code: the user's permission to run code the model ships.

        Returns:
            The ranker, before ``ranker.safetensors`` is loaded into it.
        """
        return cls(backbone, tokenizer, spec)

    def _frozen_base(self) -> bool:
        return self._frozen_base_method(self.backbone.method)

    @staticmethod
    def _frozen_base_method(method: str) -> bool:
        return method in ADAPTERS and ADAPTERS.get(method).frozen_base

    @property
    def can_merge(self) -> bool:
        """True for one LoRA adapter that every input goes through (``Adapter.mergeable``: lora, lora++). ss_lora is
        not mergeable: its query and document towers use different adapters, which one set of merged weights cannot
        hold."""
        b = self.backbone
        mergeable = b.method in ADAPTERS and ADAPTERS.get(b.method).mergeable
        return mergeable and b.tower_switch is None and b.hidden_prefix is None

    def merge_adapter(self) -> None:
        """Fold LoRA weights into the backbone: zero inference overhead, same scores."""
        if not self.can_merge:
            raise SsftError(f"only a single LoRA adapter (lora, lora++) can be merged, not '{self.backbone.method}'")
        self.backbone = Backbone(self.backbone.model.merge_and_unload(), "full")

    # ------------------------------------------------------------ the public inference interface (``ssft.load``)
    # sentence-transformers' call shapes (``CrossEncoder.predict`` / ``rank``, ``SentenceTransformer.encode_query`` /
    # ``encode_document`` / ``encode`` / ``similarity``), with ssft's scores: what ssft-rerank scores, unscaled where
    # a model scales (a dense model's scores are ``score_scale`` x its vectors' dot product, 20 x cosine by default)
    def __repr__(self) -> str:
        backend, precision = parse_served(served_as(self))
        return (f"{type(self).__name__}(architecture={self.architecture!r}, base_model={self.spec.get('base_model')!r}, "
                f"method={self.spec.get('method')!r}, precision={precision!r}, backend={backend!r}, "
                f"max_length={self.max_length}, query_max_length={self.query_max_length})")

    def predict(self, pairs: Sequence[tuple[str, str]] | tuple[str, str], batch_size: int = 32,
                activation_fn: Callable[[torch.Tensor], torch.Tensor] | None = None,
                show_progress_bar: bool | None = None, convert_to_numpy: bool = True,
                convert_to_tensor: bool = False) -> np.ndarray | torch.Tensor | list[torch.Tensor] | np.float32:
        """One score per ``(query, document)`` pair, in the order given: what ssft-rerank scores them (higher is
        more relevant), in sentence-transformers' shape (``CrossEncoder.predict``). Runs without gradient at the
        ranker's precision (``ssft.load``'s ``precision``; fp32 for a ranker built otherwise), ``batch_size`` pairs
        at a time, longest first by exact token count so each batch pads little (a bi-encoder encodes each distinct
        query and document once).

        Args:
            pairs: a list of (query, document) pairs of strings, or one pair.
            batch_size: pairs (a bi-encoder: texts) per forward pass.
            activation_fn: a callable applied to the scores (a float32 tensor), e.g. ``torch.nn.Sigmoid()``; None
                returns the raw scores (ssft's scores are logits: unlike sentence-transformers' ``CrossEncoder``,
                no sigmoid is applied by default).
            show_progress_bar: None: progress past 256 items (a bar on a terminal or in a notebook, else
                ``ssft.progress`` log lines); True: a bar; False: none.
            convert_to_numpy: a float32 numpy array (the default); False: a list of 0-d tensors.
            convert_to_tensor: one float32 tensor (overrides ``convert_to_numpy``).

        Returns:
            The scores, shape (len(pairs),); for one pair a scalar (a numpy float32, or a 0-d tensor).

        Examples:
            >>> model.predict([("vitamin d", "bone health and vitamin d"), ("vitamin d", "a recipe")])
            array([ 3.1, -2.4], dtype=float32)
            >>> model.predict(("vitamin d", "bone health and vitamin d"))
            np.float32(3.1)
        """
        if pairs is None or isinstance(pairs, (str, Mapping)):
            raise SsftError(f"predict: pairs: expected a list of (query, document) pairs of strings, got "
                            f"{type(pairs).__name__}")
        single = isinstance(pairs, (tuple, list)) and len(pairs) > 0 and isinstance(pairs[0], str)
        if single:
            pairs = [_pair(pairs, 0, "predict: pairs: one pair")]
        else:
            pairs = [_pair(p, i) for i, p in enumerate(pairs)]
        _check_batch_size(batch_size)
        show = check_flag(show_progress_bar, "predict: show_progress_bar")
        to_numpy, to_tensor = _flag(convert_to_numpy, "predict: convert_to_numpy"), _flag(convert_to_tensor,
                                                                                              "predict: convert_to_tensor")
        _check_activation(activation_fn, "predict")
        scores = _activated(self._pair_scores(pairs, batch_size, show), activation_fn, "predict")
        out = _scores_out(scores, to_numpy, to_tensor)
        return out[0] if single else out

    def _pair_scores(self, pairs: list[tuple[str, str]], batch_size: int, show: bool | None) -> torch.Tensor:
        """Hook: float32 scores of ``pairs`` in their order (a cross-encoder: batches of pairs by token count)."""
        lengths = self.pair_token_lengths([q for q, _ in pairs], [d for _, d in pairs])
        with self._serving() as model, inference_progress("scoring pairs", len(pairs), "pairs", show) as bar:
            device = _device_of(model)
            scores = torch.zeros(len(pairs), dtype=torch.float32, device=device)
            for rows in length_batches(lengths, batch_size):
                batch = model.tokenize([pairs[i][0] for i in rows], [pairs[i][1] for i in rows])
                out = model(**{k: v.to(device) for k, v in batch.items()})
                scores[torch.tensor(rows, device=device)] = out.float().reshape(-1)
                bar.update(len(rows))
        return scores

    def pair_token_lengths(self, queries: list[str], documents: list[str]) -> list[int]:
        """Tokens of each (query, document) pair as ``tokenize`` builds its row (``ssft.models.batching``): the
        order ``predict`` batches pairs in. Each distinct text is tokenised once, its ids kept for the batches.

        Args:
            queries: the first text of each pair.
            documents: the second text of each pair.

        Returns:
            One count per pair.
        """
        return pair_lengths_of(self.tokenizer, self.token_cache(), queries, documents, self.max_length)

    def rank(self, query: str | Mapping[str, str], documents: Sequence[str] | Mapping[str, Any],
             top_k: int | None = None, return_documents: bool = False, batch_size: int = 32,
             show_progress_bar: bool | None = None,
             activation_fn: Callable[[torch.Tensor], torch.Tensor] | None = None, *,
             corpus: Mapping[str, str] | None = None) -> list[dict[str, Any]] | dict[str, dict[str, float]]:
        """``documents`` ranked for ``query``, best first, in sentence-transformers' shape (``CrossEncoder.rank``):
        ``[{"corpus_id": index into documents, "score": float}, ...]`` (ties in input order), each hit with its
        ``"text"`` when ``return_documents``. The scores are ``predict``'s (a dense model's: ``score_scale`` x the
        dot product of its vectors, 20 x cosine by default).

        Many queries at once, no qrels needed: ``query`` a dict of query id → text, ``documents`` a candidate run
        (query id → document ids, e.g. ``ssft.data.trec.read_run``'s dict of id → first-stage score) and ``corpus``
        document id → text; returns the run re-scored, query id → {document id: score} best first.

        Args:
            query: one query, or a dict of query id → text (with a candidate run and ``corpus``).
            documents: the texts to rank (``corpus_id`` is a position in it), or a candidate run.
            top_k: keep the best k (None: all).
            return_documents: add each hit's ``"text"`` (one query only).
            batch_size: texts or pairs per forward pass.
            show_progress_bar: as ``predict``'s.
            activation_fn: as ``predict``'s: a callable applied to the scores before they are sorted.
            corpus: document id → text, with a candidate run.

        Returns:
            The hits, best first; or, for a candidate run, query id → {document id: score}.

        Examples:
            >>> model.rank("vitamin d", ["a recipe", "bone health and vitamin d"], top_k=1)
            [{'corpus_id': 1, 'score': 3.1}]
            >>> model.rank("vitamin d", ["a recipe", "bone health and vitamin d"], top_k=1, return_documents=True)
            [{'corpus_id': 1, 'score': 3.1, 'text': 'bone health and vitamin d'}]
            >>> model.rank({"q1": "vitamin d"}, {"q1": {"d7": 12.0, "d2": 9.5}}, corpus={"d2": "...", "d7": "..."})
            {'q1': {'d2': 3.1, 'd7': -0.4}}
        """
        top_k = whole_number(top_k, "rank: top_k", allow_none=True)
        return_documents = _flag(return_documents, "rank: return_documents")
        _check_batch_size(batch_size)
        show = check_flag(show_progress_bar, "rank: show_progress_bar")
        _check_activation(activation_fn, "rank")
        if isinstance(query, Mapping):
            if return_documents:
                raise SsftError("rank: return_documents applies to one query with a list of documents; a candidate "
                                "run's scores are keyed by document id")
            return self._rank_run(query, documents, corpus, top_k, batch_size, show, activation_fn)
        if not isinstance(query, str):
            raise SsftError(f"rank: the query must be a string, got {type(query).__name__}")
        text(query, "rank: query")
        if isinstance(documents, Mapping):  # a dict of id -> text would be ranked by its keys
            raise SsftError("rank: documents is a dict; with one query give a list of texts (corpus_id is then its "
                            "position), or pass a dict of queries, a candidate run as documents and corpus=")
        documents = _texts(documents, "rank: documents")
        return self._ranked(query, documents, top_k, return_documents, batch_size, show, activation_fn)

    def _ranked(self, query: str, documents: list[str], top_k: int | None, return_documents: bool, batch_size: int,
                show: bool | None, activation_fn) -> list[dict[str, Any]]:
        scores = _activated(self._rank_scores(query, documents, batch_size, show), activation_fn, "rank")
        values = scores.float().cpu().reshape(-1).tolist()
        order = sorted(range(len(documents)), key=lambda i: (-values[i], i))
        hits = [{"corpus_id": i, "score": values[i]} for i in order[:top_k]]
        if return_documents:
            for hit in hits:
                hit["text"] = documents[hit["corpus_id"]]
        return hits

    def _rank_run(self, queries: Mapping[str, str], run: Any, corpus: Mapping[str, str] | None, top_k: int | None,
                  batch_size: int, show: bool | None = None, activation_fn=None) -> dict[str, dict[str, float]]:
        """``rank`` over a candidate run: each query's candidates scored as ``rank`` scores them."""
        if not isinstance(run, Mapping) or corpus is None or not isinstance(corpus, Mapping):
            raise SsftError("rank: with a dict of queries, documents is a candidate run (query id -> document ids) "
                            "and corpus a dict of document id -> text")
        jobs: list[tuple[str, list[str]]] = []
        for qid in sorted(run):
            if qid not in queries:
                raise SsftError(f"rank: query '{qid}' of the candidate run is not among the queries")
            if isinstance(run[qid], (str, bytes)):  # its characters would be read as document ids
                raise SsftError(f"rank: the candidates of query '{qid}' are one string ({run[qid]!r}); give a list of "
                                f"document ids or a dict of document id -> first-stage score")
            candidates = list(run[qid]) if isinstance(run[qid], Mapping) else run[qid]
            doc_ids = texts(candidates, f"rank: the candidates of query '{qid}'")
            doc_ids = list(dict.fromkeys(doc_ids))
            missing = next((d for d in doc_ids if d not in corpus), None)
            if missing is not None:
                raise SsftError(f"rank: document '{missing}' (a candidate of query '{qid}') is not in corpus")
            if doc_ids:
                jobs.append((qid, doc_ids))
        out: dict[str, dict[str, float]] = {}
        total = sum(len(doc_ids) for _, doc_ids in jobs)
        with inference_progress("ranking candidates", total, "pairs", show) as bar:
            for qid, doc_ids in jobs:
                query = text(queries[qid], f"rank: query '{qid}'")
                documents = _texts([corpus[d] for d in doc_ids], f"rank: the documents of query '{qid}'")
                ranked = self._ranked(query, documents, top_k, False, batch_size, False, activation_fn)
                out[qid] = {doc_ids[hit["corpus_id"]]: hit["score"] for hit in ranked}
                bar.update(len(doc_ids))
        return out

    def _rank_scores(self, query: str, documents: list[str], batch_size: int, show: bool | None = None) -> torch.Tensor:
        """Hook: the float32 scores ``rank`` sorts (a bi-encoder encodes the query once)."""
        return self._pair_scores([(query, d) for d in documents], batch_size, show)

    def _no_embeddings(self, what: str) -> SsftError:
        return SsftError(f"{what}: a '{self.architecture}' model scores (query, document) pairs together and has no "
                         f"separate embeddings; use predict or rank, or a bi-encoder (twin, colbert, dense)")

    def encode_query(self, texts: str | Sequence[str], batch_size: int = 32, show_progress_bar: bool | None = None,
                     convert_to_numpy: bool = True, convert_to_tensor: bool = False,
                     normalize_embeddings: bool = False) -> np.ndarray | torch.Tensor | list:
        """Query embeddings (bi-encoders; sentence-transformers' ``encode_query``). A cross-encoder scores pairs
        only: an SsftError.

        Args:
            texts: one text or a list of texts.
            batch_size: texts per forward pass.
            show_progress_bar: as ``predict``'s.
            convert_to_numpy: float32 numpy (the default); False: a list of tensors.
            convert_to_tensor: one tensor (overrides ``convert_to_numpy``).
            normalize_embeddings: L2-normalise each vector.

        Returns:
            See ``BiEncoder.encode_query``.
        """
        raise self._no_embeddings("encode_query")

    def encode_document(self, texts: str | Sequence[str], batch_size: int = 32, show_progress_bar: bool | None = None,
                        convert_to_numpy: bool = True, convert_to_tensor: bool = False,
                        normalize_embeddings: bool = False) -> np.ndarray | torch.Tensor | list:
        """Document embeddings (bi-encoders; sentence-transformers' ``encode_document``): as ``encode_query``.

        Args:
            texts: one text or a list of texts.
            batch_size: texts per forward pass.
            show_progress_bar: as ``predict``'s.
            convert_to_numpy: float32 numpy (the default); False: a list of tensors.
            convert_to_tensor: one tensor (overrides ``convert_to_numpy``).
            normalize_embeddings: L2-normalise each vector.

        Returns:
            See ``BiEncoder.encode_document``.
        """
        raise self._no_embeddings("encode_document")

    def encode(self, texts: str | Sequence[str], batch_size: int = 32, show_progress_bar: bool | None = None,
               convert_to_numpy: bool = True, convert_to_tensor: bool = False,
               normalize_embeddings: bool = False) -> np.ndarray | torch.Tensor | list:
        """Embeddings of a symmetric bi-encoder (sentence-transformers' ``encode``): see ``BiEncoder.encode``.

        Args:
            texts: one text or a list of texts.
            batch_size: texts per forward pass.
            show_progress_bar: as ``predict``'s.
            convert_to_numpy: float32 numpy (the default); False: a list of tensors.
            convert_to_tensor: one tensor (overrides ``convert_to_numpy``).
            normalize_embeddings: L2-normalise each vector.

        Returns:
            See ``BiEncoder.encode``.
        """
        raise self._no_embeddings("encode")

    def similarity(self, embeddings1: Any, embeddings2: Any) -> torch.Tensor:
        """The score of every embedding of ``embeddings1`` against every one of ``embeddings2`` (bi-encoders;
        sentence-transformers' ``similarity``): see ``BiEncoder.similarity``.

        Args:
            embeddings1: query embeddings.
            embeddings2: document embeddings.

        Returns:
            A (len(embeddings1), len(embeddings2)) float32 tensor.
        """
        raise self._no_embeddings("similarity")

    @contextmanager
    def _serving(self) -> Iterator[Ranker]:
        """Eval mode, no gradient, the ranker's precision (train mode is restored afterwards)."""
        was_training = self.training
        self.eval()
        try:
            with torch.inference_mode(), inference(self, model_precision(self)) as model:
                yield model
        finally:
            self.train(was_training)


def _device_of(model: nn.Module) -> torch.device:
    param = next(iter(model.parameters()), None)
    return param.device if param is not None else torch.device("cpu")


def _check_batch_size(batch_size: int) -> None:
    whole_number(batch_size, "batch_size")


def _flag(value: Any, name: str) -> bool:
    """A True / False argument (numpy's bool too); anything else a one-line error naming it."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise SsftError(f"{name} must be True or False, got {value!r}")


def _check_activation(activation_fn: Any, what: str) -> None:
    if activation_fn is not None and not callable(activation_fn):
        raise SsftError(f"{what}: activation_fn must be a callable (e.g. torch.nn.Sigmoid()) or None, got "
                        f"{type(activation_fn).__name__}")


def _activated(scores: torch.Tensor, activation_fn: Any, what: str) -> torch.Tensor:
    """``activation_fn(scores)`` as a float32 tensor of the scores' shape (the scores themselves without one)."""
    if activation_fn is None:
        return scores
    out = activation_fn(scores)
    out = out if isinstance(out, torch.Tensor) else torch.as_tensor(np.asarray(out, dtype=np.float32))
    if tuple(out.shape) != tuple(scores.shape):
        raise SsftError(f"{what}: activation_fn returned shape {tuple(out.shape)} for scores of shape "
                        f"{tuple(scores.shape)}; it must act element-wise")
    return out.float()


def _scores_out(scores: torch.Tensor, to_numpy: bool, to_tensor: bool) -> np.ndarray | torch.Tensor | list:
    """Scores as sentence-transformers returns them: one tensor, a float32 numpy array, or a list of 0-d tensors."""
    if to_tensor:
        return scores
    if to_numpy:
        return scores.detach().float().cpu().numpy()
    return list(scores)


def _texts(values: Sequence[str], what: str) -> list[str]:
    """``values`` as a list of strings (``ssft.core.arguments.texts``: a generator is read once; a lone string, a
    mapping or None is refused, as is a text no tokenizer takes)."""
    return texts(values, what)


def _pair(pair: Any, i: int, what: str | None = None) -> tuple[str, str]:
    what = what or f"predict: pair {i}"
    if not isinstance(pair, (tuple, list)) or len(pair) != 2 or not all(isinstance(t, str) for t in pair):
        raise SsftError(f"{what}: expected a (query, document) pair of strings, got {pair!r}"[:300])
    return text(pair[0], f"{what}: query"), text(pair[1], f"{what}: document")

def load_ranker(path: str | Path, trust_remote_code: bool = False) -> Ranker:
    """Load any saved ranker folder, whatever its architecture. ``trust_remote_code``: the user's permission to
    run code the model ships (``--trust-remote-code``); a folder saved with trust_remote_code needs it."""
    spec = Ranker.read_spec(path)
    Ranker.check_trust(Path(path), spec, trust_remote_code)
    return MODELS.get(spec.get("architecture", ""), f"{path}/{SPEC_FILE}: architecture").load(
        path, trust_remote_code=trust_remote_code)

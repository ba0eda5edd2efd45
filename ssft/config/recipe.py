"""Recipes: one YAML file is the whole experiment.

Sections (every key is checked; unknown keys and wrong types are one-line errors naming the key):

- ``seed``
- ``model``    architecture, backbone name/path, lengths, ranker-head learning rate
- ``adapter``  fine-tuning method by name plus its hyper-parameters (see ``ssft.adapters``)
- ``loss``     loss by name plus its options (see ``ssft.losses``)
- ``data``     dataset, splits, subsampling, negatives
- ``training`` passed to ``transformers.TrainingArguments`` unchanged (every field is allowed)
- ``eval``     metrics, first stage, rerank depth, model selection
- ``callbacks`` extra callbacks by name, or ``{name: daft, delta: 250}`` with options
- ``distillation`` optional: a teacher and the distillation objective (``ssft.training.distillation``; dense students)

``key=value`` overrides (``training.learning_rate=1e-4 adapter.r=8``) are applied before validation.

Validation reads nothing above ``ssft.config``: the adapter, loss and callbacks parse their own typed configs
(``Config`` beside their code, through ``ssft.config.parse``), reached by name through the registries; rules
between components read the capability flags their base classes declare (``Ranker.bi_encoder``,
``Adapter.needs_towers``, ``RankingLoss.needs_teacher`` ...), never their names. ``recipe.adapter.config`` and
``recipe.loss.config`` are the typed configs, parsed once here.

Every section is a ``Checked`` dataclass parsed by ``ssft.config.parse`` (``training`` excepted: TrainingArguments
keys, ``ssft.config.training``); the rules of one section alone are its dataclass's ``problem()``, beside it
(``ssft.config.data``, ``ssft.config.distillation``, ``ssft.config.model``, the plugins' ``Config``); this module
keeps the rules between sections.
"""
from __future__ import annotations

import copy
import dataclasses
import os
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ssft.config.data import DataConfig
from ssft.config.distillation import DistillationConfig, GeneratedQueriesConfig, parse_distillation
from ssft.config.metrics import DEFAULT_METRICS, parse_measures
from ssft.config.model import ModelConfig
from ssft.config.model import either as _either
from ssft.config.parse import Checked, Problem, coerce, parse_dataclass, problem_of
from ssft.config.registry import ADAPTERS, CALLBACKS, LOSSES, MODELS, Registry
from ssft.config.strict_yaml import YAML_MAX_VALUES, safe_load_strict
from ssft.config.training import SEED_RANGE, check_training, seed_problem, training_section
from ssft.core.errors import SsftError, closest
from ssft.core.hub import max_input_length, resolve_model
from ssft.core.precision import DEFAULT as DEFAULT_PRECISION
from ssft.core.precision import check as check_precision
from ssft.core.precision import check_backend


class _NamedSection:
    """A section that names a plugin (``adapter.method``, ``loss.name``) plus its options as the recipe gives them
    (``options``: what ``to_dict`` writes and a saved model's spec keeps); ``config`` is the plugin's typed config,
    parsed from them once (``parse``), and parsed again only when the name or the options were replaced since."""

    registry: typing.ClassVar[Registry]
    section: typing.ClassVar[str]
    name_key: typing.ClassVar[str]
    options: dict[str, Any]
    _parsed: tuple[str, dict[str, Any], Any] | None

    @property
    def plugin_name(self) -> str:
        raise NotImplementedError

    def parse(self, where: str | None = None) -> Any:
        """The typed config of ``options`` (the plugin's ``config_from``: keys, types and values checked)."""
        where = where or self.section
        config = self.registry.get(self.plugin_name, f"{where}.{self.name_key}").config_from(self.options, where)
        self._parsed = (self.plugin_name, copy.deepcopy(self.options), config)
        return config

    @property
    def config(self) -> Any:
        """The plugin's typed config (its class's ``Config``), e.g. ``LoraOptions(r=8, ...)``."""
        if self._parsed is None or self._parsed[0] != self.plugin_name or self._parsed[1] != self.options:
            return self.parse()
        return self._parsed[2]


@dataclass
class AdapterSection(_NamedSection):
    registry: typing.ClassVar[Registry] = ADAPTERS
    section: typing.ClassVar[str] = "adapter"
    name_key: typing.ClassVar[str] = "method"

    method: str = "full"
    options: dict[str, Any] = field(default_factory=dict)  # validated by the adapter's own config class (``config``)
    _parsed: tuple[str, dict[str, Any], Any] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def plugin_name(self) -> str:
        return self.method


@dataclass
class LossSection(_NamedSection):
    registry: typing.ClassVar[Registry] = LOSSES
    section: typing.ClassVar[str] = "loss"
    name_key: typing.ClassVar[str] = "name"

    name: str = "pairwise_softmax"
    options: dict[str, Any] = field(default_factory=dict)  # validated by the loss's own config class (``config``)
    # + this weight x 004 §4.2's token reconstruction loss, beside whichever loss (a dual-pooled cross-encoder); 0 = off
    reconstruction_weight: float = 0.0
    _parsed: tuple[str, dict[str, Any], Any] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def plugin_name(self) -> str:
        return self.name


@dataclass
class EvalConfig(Checked):
    metrics: list[str] = field(default_factory=lambda: list(DEFAULT_METRICS))
    first_stage: str = "bm25"  # bm25, or a TREC run file (then it applies to the test split)
    validation_first_stage: str | None = None  # TREC run for the validation split; default bm25
    depth: int = 100  # rerank the first stage's top-k
    validation_depth: int | None = None  # default: depth
    selection_metric: str = "nDCG@10"  # best validation epoch is kept by this metric
    batch_size: int = 64
    interpolation: float | str | None = None  # alpha in [0,1], or "auto" (tuned on validation); reported separately
    fusion: float | str | None = None  # dense only: alpha >= 0 of 003 Eq. 7 (dense-sparse union), or "auto"
    precision: str = DEFAULT_PRECISION  # inference (validation, test, teachers): auto | fp32 | bf16 | int8 (ssft.core.precision)
    # runtime of the start's and the test split's scoring (fixed weights): torch | openvino | auto (OpenVINO where it
    # is installed, the run is on the CPU, the method converts and the test job repays the conversion); validation,
    # whose weights change at every evaluation, stays on torch
    backend: str = "torch"
    # score the starting model (metrics.json's start row on the test split, and epoch 0 of the best-epoch selection
    # on validation); false skips both: a faster run whose selection is among the trained epochs only
    start: bool = True

    def problem(self) -> Problem:
        if self.batch_size < 1:
            return "batch_size", f"must be >= 1, got {self.batch_size}"
        if self.depth < 1 or (self.validation_depth is not None and self.validation_depth < 1):
            return "depth", "must be >= 1"
        if isinstance(self.interpolation, str) and self.interpolation != "auto":
            return "interpolation", f"expected a number in [0, 1] or 'auto', got '{self.interpolation}'"
        if isinstance(self.interpolation, float) and not 0.0 <= self.interpolation <= 1.0:
            return "interpolation", f"expected a number in [0, 1], got {self.interpolation}"
        return (problem_of(parse_measures, self.metrics, "metrics")
                or problem_of(lambda name, where: parse_measures([name], where), self.selection_metric, "selection_metric")
                or problem_of(check_precision, self.precision, "precision")
                or problem_of(check_backend, self.backend, "backend"))


@dataclass
class Recipe:
    seed: int = 42
    model: ModelConfig = field(default_factory=ModelConfig)
    adapter: AdapterSection = field(default_factory=AdapterSection)
    loss: LossSection = field(default_factory=LossSection)
    data: DataConfig = field(default_factory=DataConfig)
    training: dict[str, Any] = field(default_factory=dict)
    eval: EvalConfig = field(default_factory=EvalConfig)
    callbacks: list[Any] = field(default_factory=list)  # names, or {name: ..., options...} mappings
    distillation: DistillationConfig | None = None
    source: str = "<recipe>"  # file the recipe came from, for error messages

    def to_dict(self) -> dict[str, Any]:
        out = {
            "seed": self.seed,
            "model": self.model.to_dict(),
            "adapter": {"method": self.adapter.method, **self.adapter.options},
            "loss": {"name": self.loss.name, **self.loss.options,
                     **({"reconstruction_weight": self.loss.reconstruction_weight} if self.loss.reconstruction_weight else {})},
            "data": dataclasses.asdict(self.data),
            "training": dict(self.training),
            "eval": dataclasses.asdict(self.eval),
            "callbacks": list(self.callbacks),
        }
        if self.distillation is not None:
            out["distillation"] = dataclasses.asdict(self.distillation)
        return out

    @property
    def output_dir(self) -> Path:
        return Path(self.training["output_dir"])

    def check_model(self) -> None:
        """The model is found and the lengths fit it (``check_model``): run before any data work or output."""
        check_model(self)


# ---------------------------------------------------------------- loading


def load_recipe(path: str | Path, overrides: list[str] | None = None) -> Recipe:
    """Read a YAML recipe, apply ``key=value`` overrides, validate everything."""
    path = Path(path)
    if not path.is_file():
        raise SsftError(f"recipe file not found: {path}")
    try:
        raw = safe_load_strict(path.read_text(encoding="utf-8"), str(path))
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise SsftError(f"{where}: malformed YAML: {problem}") from None
    except UnicodeDecodeError:
        raise SsftError(f"{path}: not a UTF-8 text file") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise SsftError(f"{path}: a recipe must be a mapping of sections, got {type(raw).__name__}")
    for item in overrides or []:
        apply_override(raw, item)
    return recipe_from_dict(raw, source=str(path))


def apply_override(raw: dict[str, Any], item: str) -> None:
    """Apply one ``a.b.c=value`` override in place; value parsed as YAML (``8`` → int, ``[a,b]`` → list)."""
    if "=" not in item:
        raise SsftError(f"override '{item}': expected key=value (e.g. training.learning_rate=1e-4)")
    key, _, text = item.partition("=")
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise SsftError(f"override '{item}': empty key")
    if text.startswith("="):
        raise SsftError(f"override '{item}': {key}: the value starts with '=' (did you mean {key}={text.lstrip('=')}?)")
    try:
        value = safe_load_strict(text, f"override '{item}'", line_numbers=False, key_prefix=key) if text.strip() else None
    except yaml.YAMLError:
        value = text
    parts = key.split(".")
    node = raw
    for depth, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise SsftError(f"override '{item}': '{'.'.join(parts[:depth + 1])}' is not a section")
        node = child
    node[parts[-1]] = value


def recipe_from_dict(raw: dict[str, Any], source: str = "<recipe>") -> Recipe:
    known = {"seed", "model", "adapter", "loss", "data", "training", "eval", "callbacks", "distillation"}
    for key in raw:
        if key not in known:
            raise SsftError(f"{source}: unknown section '{key}'{closest(str(key), known)}; known: {', '.join(sorted(known))}")
    recipe = Recipe(source=source)
    recipe.seed = coerce(raw.get("seed", 42), int, f"{source}: seed")
    recipe.model = ModelConfig.from_section(raw.get("model"), f"{source}: model")
    recipe.data = parse_dataclass(DataConfig, raw.get("data"), f"{source}: data")
    recipe.eval = parse_dataclass(EvalConfig, raw.get("eval"), f"{source}: eval")
    recipe.adapter = _named_section(AdapterSection, raw.get("adapter"), "method", "full", f"{source}: adapter")
    recipe.loss = _named_section(LossSection, raw.get("loss"), "name", "pairwise_softmax", f"{source}: loss")
    if "reconstruction_weight" in recipe.loss.options:  # beside any loss: not one loss's option
        recipe.loss.reconstruction_weight = coerce(recipe.loss.options.pop("reconstruction_weight"), float,
                                                   f"{source}: loss.reconstruction_weight")
    callbacks = raw.get("callbacks") or []
    if not isinstance(callbacks, list) or not all(
            isinstance(c, str) or (isinstance(c, dict) and isinstance(c.get("name"), str)) for c in callbacks):
        raise SsftError(f"{source}: callbacks must be a list of names, or of mappings {{name: ..., option: value}}")
    recipe.callbacks = callbacks
    recipe.training = training_section(raw.get("training"), source)
    recipe.distillation = parse_distillation(raw.get("distillation"), f"{source}: distillation")
    _expand_paths(recipe)
    seed = seed_problem(recipe.seed)
    if seed:
        raise SsftError(f"{source}: seed: {seed}")
    check_training(recipe.training, source)
    _validate_semantics(recipe, source)
    return recipe


def _expand_paths(recipe: Recipe) -> None:
    """``~`` in a path-valued key is the home folder, once, here: every later reader sees the same path (an
    unexpanded ``~/runs`` was ``./~/runs`` to some and ``$HOME/runs`` to others)."""
    def expand(value):
        return os.path.expanduser(value) if isinstance(value, str) and value.startswith("~") else value

    m, d, e = recipe.model, recipe.data, recipe.eval
    m.name = expand(m.name)
    if "document_name" in m.options:  # dense's document tower
        m.options["document_name"] = expand(m.options["document_name"])
    d.dataset = expand(d.dataset)
    e.first_stage, e.validation_first_stage = expand(e.first_stage), expand(e.validation_first_stage)
    if "teacher" in recipe.loss.options:
        recipe.loss.options["teacher"] = expand(recipe.loss.options["teacher"])
    if recipe.distillation is not None:
        recipe.distillation.teacher = expand(recipe.distillation.teacher)
        if recipe.distillation.generated_queries is not None:
            recipe.distillation.generated_queries.model = expand(recipe.distillation.generated_queries.model)
    recipe.training["output_dir"] = expand(recipe.training["output_dir"])  # outputs and checkpoints in one folder


def check_model(recipe: Recipe) -> None:
    """What the recipe asks of its model(s), read offline from config.json before any data work or output: the
    model is found (an SsftError saying where ssft looked, otherwise) and ``model.max_length`` /
    ``model.query_max_length`` fit its position embeddings (longer inputs crash mid-training, or index past them)."""
    m = recipe.model
    document_name = getattr(m.config, "document_name", None)  # dense's document tower
    if document_name is not None:  # two towers: queries and documents
        towers = [("model.name", m.name, ["query_max_length"]), ("model.document_name", document_name, ["max_length"])]
    else:
        towers = [("model.name", m.name, ["max_length", "query_max_length"])]
    for key, name, lengths in towers:
        resolve_model(name)
        limit = max_input_length(name)
        if limit is None:
            continue
        for length in lengths:
            value = getattr(m, length)
            if value > limit:
                raise SsftError(f"{recipe.source}: model.{length}: {value} is beyond what {key} '{name}' can encode "
                                f"(its position embeddings hold {limit} tokens); set model.{length} <= {limit}")


def _named_section(cls, value, name_key: str, default: str, where: str):
    if value is None:
        return cls(default, {})
    if isinstance(value, str):
        return cls(value, {})
    if not isinstance(value, dict):
        raise SsftError(f"{where}: expected a mapping, got {type(value).__name__}")
    options = dict(value)
    name = options.pop(name_key, default)
    if not isinstance(name, str):
        raise SsftError(f"{where}.{name_key}: expected a name, got {name!r}")
    return cls(name, options)


# ---------------------------------------------------------------- what the sections ask of each other


def _callback_class(entry: Any, where: str):
    """The class a ``callbacks`` entry names (an unknown name: the registry's one-line error)."""
    return CALLBACKS.get(entry if isinstance(entry, str) else entry["name"], where)


def _callback_options(entry: Any) -> dict[str, Any]:
    return {} if isinstance(entry, str) else {k: v for k, v in entry.items() if k != "name"}


def _validate_semantics(recipe: Recipe, source: str) -> None:
    """The plugins' configs parsed, then the rules between sections, read from the components' capability flags
    (each section's own rules ran when it was parsed: its dataclass's ``problem()``)."""
    model_cls = MODELS.get(recipe.model.architecture, f"{source}: model.architecture")
    adapter_cls = ADAPTERS.get(recipe.adapter.method, f"{source}: adapter.method")
    adapter_config = recipe.adapter.parse(f"{source}: adapter")  # the method's typed config: keys, types, values
    loss_cls = LOSSES.get(recipe.loss.name, f"{source}: loss.name")
    recipe.loss.parse(f"{source}: loss")
    _validate_teacher_loss(recipe, source, model_cls, loss_cls)
    for entry in recipe.callbacks:  # the name, and its options through the callback's own config
        _callback_class(entry, f"{source}: callbacks").config_from(_callback_options(entry), f"{source}: callbacks")
    _validate_training_data(recipe, source, model_cls, loss_cls)
    recipe.model.parse(f"{source}: model")  # the architecture's own keys (its Config), after the paths were expanded
    _validate_reconstruction(recipe, source, model_cls)
    _validate_adapter(recipe, source, model_cls, adapter_cls, adapter_config)
    _validate_document_tower(recipe, source, adapter_cls)
    _validate_fusion(recipe, source, model_cls)
    _validate_distillation(recipe, source, model_cls, adapter_cls, loss_cls)
    for entry in recipe.callbacks:  # what a callback needs of the training section (e.g. DAFT's epochs)
        callback = _callback_class(entry, f"{source}: callbacks")
        problem = callback.training_problem(callback.config_from(_callback_options(entry), f"{source}: callbacks"),
                                            recipe.training)
        if problem:
            raise SsftError(f"{source}: callbacks.{callback.name}: {problem}")
    if recipe.eval.interpolation == "auto" and not recipe.data.validation_split:
        raise SsftError(f"{source}: eval.interpolation: 'auto' tunes the weight on data.validation_split, which is not set")


def _validate_adapter(recipe: Recipe, source: str, model_cls, adapter_cls, adapter_config) -> None:
    """A semi-Siamese method (or a hybrid's part) needs a bi-encoder; a hybrid sets its own epochs."""
    architecture = recipe.model.architecture
    if adapter_cls.needs_towers and not model_cls.bi_encoder:
        raise SsftError(f"{source}: adapter.method: '{recipe.adapter.method}' is semi-Siamese (query and document towers); "
                        f"it needs a bi-encoder model.architecture (twin, colbert), not '{architecture}'")
    for key, method in adapter_cls.parts(adapter_config):  # a hybrid's first and second methods
        if ADAPTERS.get(method, f"{source}: adapter.{key}.method").needs_towers and not model_cls.bi_encoder:
            raise SsftError(f"{source}: adapter.{key}.method: '{method}' is semi-Siamese; it needs a bi-encoder "
                            f"model.architecture (twin, colbert), not '{architecture}'")
    if adapter_cls.trains_in_phases:
        for key in ("num_train_epochs", "max_steps"):
            if key in recipe.training:
                raise SsftError(f"{source}: training.{key}: a hybrid sets its epochs per phase "
                                f"(adapter.first_epochs, adapter.second_epochs); remove training.{key}")


def _validate_reconstruction(recipe: Recipe, source: str, model_cls) -> None:
    """loss.reconstruction_weight (004 §4.2): a ranker whose head carries a token-reconstruction head."""
    weight = recipe.loss.reconstruction_weight
    if weight < 0:
        raise SsftError(f"{source}: loss.reconstruction_weight: must be >= 0, got {weight:g}")
    if weight and not model_cls.carries_reconstruction_head(recipe.model.config):
        readers = MODELS.matching(lambda c: bool(c.reconstruction_heads))
        heads = sorted({h for name in readers for h in MODELS.get(name).reconstruction_heads})
        head = getattr(recipe.model.config, "head", None)  # the architecture's, when it has one
        raise SsftError(f"{source}: loss.reconstruction_weight: the token reconstruction loss (004 §4.2) trains a "
                        f"model.architecture {_either(readers)} with model.head {_either(heads)}, not "
                        f"'{recipe.model.architecture}'" + (f" with head '{head}'" if head is not None else ""))


def _validate_fusion(recipe: Recipe, source: str, model_cls) -> None:
    """eval.fusion: 003 Eq. 7 fuses a full-retrieval (dense) run with the first stage's."""
    f = recipe.eval.fusion
    if f is None:
        return
    if not model_cls.full_retrieval:
        raise SsftError(f"{source}: eval.fusion: dense-sparse fusion (003 Eq. 7) needs a full-retrieval model "
                        f"(model.architecture {_either(MODELS.matching(lambda c: c.full_retrieval))}); "
                        f"a reranker has eval.interpolation")
    if isinstance(f, str) and f != "auto":
        raise SsftError(f"{source}: eval.fusion: expected a number >= 0 or 'auto', got '{f}'")
    if f == "auto" and not recipe.data.validation_split:
        raise SsftError(f"{source}: eval.fusion: 'auto' tunes the weight on data.validation_split, which is not set")
    if isinstance(f, float) and f < 0:
        raise SsftError(f"{source}: eval.fusion: expected a number >= 0, got {f}")


def _validate_training_data(recipe: Recipe, source: str, model_cls, loss_cls) -> None:
    """``data.num_negatives`` (0: in-batch negatives alone) and ``data.train`` against the model and the loss."""
    d = recipe.data
    if loss_cls.needs_teacher_scores:
        if d.train is None or d.train_format not in ("auto", "scored"):
            raise SsftError(f"{source}: loss.name: '{recipe.loss.name}' distils teacher scores: set data.train to a dataset "
                            f"in the scored form (query_id, document_ids, scores; e.g. what ssft-mine writes)")
        if recipe.distillation is not None:
            raise SsftError(f"{source}: distillation: loss '{recipe.loss.name}' distils the data's teacher scores; "
                            f"use one or the other")
    elif d.train_format == "scored":
        raise SsftError(f"{source}: data.train_format: scored rows train with a distillation loss (loss.name: "
                        f"{_either(LOSSES.matching(lambda c: c.needs_teacher_scores))})")
    if d.num_negatives > 0:
        return
    if not model_cls.in_batch_negatives:
        readers = MODELS.matching(lambda c: c.in_batch_negatives)
        raise SsftError(f"{source}: data.num_negatives: 0 trains on in-batch negatives alone, which only "
                        f"model.architecture {_either(readers)} has; '{recipe.model.architecture}' needs >= 1 negative")
    if loss_cls.needs_teacher_scores or loss_cls.needs_teacher:
        raise SsftError(f"{source}: data.num_negatives: 0 leaves loss '{recipe.loss.name}' no candidates to distil over; "
                        f"set it >= 1")
    k = recipe.distillation
    if k is not None and k.teacher_kind == "cross_dual_pooled" and k.score_weight:
        raise SsftError(f"{source}: data.num_negatives: 0 leaves the cross-encoder teacher's score distillation one "
                        f"document per query (a constant); set it >= 1 or distillation.score_weight: 0")


def _validate_teacher_loss(recipe: Recipe, source: str, model_cls, loss_cls) -> None:
    """A loss that distils a teacher in the loop (tct) needs a bi-encoder student and the plain in-batch rows."""
    if not loss_cls.needs_teacher:
        return
    if not model_cls.bi_encoder:
        raise SsftError(f"{source}: loss.name: '{recipe.loss.name}' distils into a bi-encoder student (dense, twin, "
                        f"colbert), not model.architecture '{recipe.model.architecture}'")
    for entry in recipe.callbacks:
        callback = _callback_class(entry, f"{source}: callbacks")
        if callback.adds_negatives:
            raise SsftError(f"{source}: callbacks: '{callback.name}' adds negatives the teacher never scores; "
                            f"the '{recipe.loss.name}' loss distils over the in-batch documents only")


def _validate_document_tower(recipe: Recipe, source: str, adapter_cls) -> None:
    """A separate document tower (dense's ``model.document_name``) against the adapter and the callbacks."""
    m = recipe.model
    if not hasattr(m.config, "document_name"):
        return
    document_name = m.config.document_name
    if document_name is not None and adapter_cls.one_backbone_only:
        allowed = ADAPTERS.matching(lambda c: not c.one_backbone_only)
        raise SsftError(f"{source}: adapter.method: '{recipe.adapter.method}' needs one shared backbone; "
                        f"with model.document_name set use {', '.join(allowed[:-1])} or {allowed[-1]}")
    for entry in recipe.callbacks:
        callback = _callback_class(entry, f"{source}: callbacks")
        if callback.needs_document_tower and document_name is None:
            raise SsftError(f"{source}: callbacks: '{callback.name}' aligns a separate query tower to a frozen document "
                            f"tower; set model.document_name (the same name as model.name gives two separate copies)")


def _validate_distillation(recipe: Recipe, source: str, model_cls, adapter_cls, loss_cls) -> None:
    """What the ``distillation`` section asks of the other sections (its own rules: ``DistillationConfig``)."""
    k = recipe.distillation
    if k is None:
        return
    where = f"{source}: distillation"
    if not model_cls.distillation_student:
        students = MODELS.matching(lambda c: c.distillation_student)
        raise SsftError(f"{where}: the student must be model.architecture {_either(students)}, "
                        f"not '{recipe.model.architecture}'")
    if loss_cls.needs_teacher:
        raise SsftError(f"{where}: loss '{recipe.loss.name}' has its own in-loop teacher (loss.teacher); use one or the other")
    if k.query_only and recipe.data.test_split in k.query_splits:
        raise SsftError(f"{where}.query_splits: '{recipe.data.test_split}' is data.test_split; its queries must not "
                        f"train the student")
    if k.inherit_documents and getattr(recipe.model.config, "document_name", None) is not None:
        raise SsftError(f"{where}.inherit_documents: the student inherits the teacher's documents; "
                        f"model.document_name must be null")
    if adapter_cls.trains_in_phases:
        raise SsftError(f"{where}: a hybrid schedule does not combine with distillation; use one adapter.method")
    for entry in recipe.callbacks:
        callback = _callback_class(entry, f"{source}: callbacks")
        if not callback.combines_with_distillation:
            raise SsftError(f"{source}: callbacks: '{callback.name}' does not combine with distillation (the teacher "
                            f"scores only the batch's documents)")


__all__ = ["DEFAULT_METRICS", "SEED_RANGE", "YAML_MAX_VALUES", "AdapterSection", "DataConfig", "DistillationConfig",
           "EvalConfig", "GeneratedQueriesConfig", "LossSection", "ModelConfig", "Recipe", "apply_override", "check_model",
           "load_recipe", "recipe_from_dict", "safe_load_strict"]

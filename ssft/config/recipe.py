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
- ``distillation`` optional: a teacher and the distillation objective (``ssft.distill``; dense students)

``key=value`` overrides (``training.learning_rate=1e-4 adapter.r=8``) are applied before validation.

Validation reads nothing above ``ssft.config``: the adapter, loss and callbacks parse their own typed configs
(``Config`` beside their code, through ``ssft.config.parse``), reached by name through the registries; rules
between components read the capability flags their base classes declare (``Ranker.bi_encoder``,
``Adapter.needs_towers``, ``RankingLoss.needs_teacher`` ...), never their names. ``recipe.adapter.config`` and
``recipe.loss.config`` are the typed configs, parsed once here.
"""
from __future__ import annotations

import copy
import dataclasses
import inspect
import json
import math
import os
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import yaml
from transformers import TrainingArguments
from transformers.integrations import integration_utils
from transformers.optimization import TYPE_TO_SCHEDULER_FUNCTION, SchedulerType, get_scheduler

from ssft.config.choices import (
    CROSS_HEADS,
    DUAL_POOLINGS,
    EMBEDDING_DISTANCES,
    GENERATION_DECODINGS,
    NEGATIVES,
    POOLINGS,
    SCORE_LOSSES,
    SCORERS,
    TEACHER_KINDS,
    TRAIN_FORMS,
)
from ssft.config.metrics import DEFAULT_METRICS, parse_measures
from ssft.config.parse import coerce, parse_dataclass, plain_type
from ssft.config.registry import ADAPTERS, CALLBACKS, LOSSES, MODELS, Registry
from ssft.config.strict_yaml import YAML_MAX_VALUES, safe_load_strict
from ssft.core.errors import SsftError, closest
from ssft.core.hub import max_input_length, resolve_model
from ssft.core.precision import DEFAULT as DEFAULT_PRECISION
from ssft.core.precision import check as check_precision


@dataclass
class ModelConfig:
    architecture: str = "cross"
    name: str = "sentence-transformers/all-MiniLM-L6-v2"
    max_length: int = 256  # cross-encoder: query + document tokens
    query_max_length: int = 32
    head_learning_rate: float | None = 1e-4  # ranker head (001 Table 8); None = training.learning_rate
    trust_remote_code: bool = False
    pooling: str = "mean"  # twin: mean | cls
    scorer: str = "combiner"  # twin: combiner (TwinBERT's residual network) | cosine | dot
    colbert_dim: int = 128  # colbert: token embedding size after the projection
    document_name: str | None = None  # dense: document tower model (own tokenizer); null = one shared backbone
    query_layers: int | list[int] | None = None  # dense: 002's layer-subset student: the first N layers, or a list
    projection_dim: int | None = None  # dense: shared projection size a (000 Eq. 10-11); null = none
    score_scale: float = 20.0  # dense: scores are scale * dot product of the final vectors
    normalize: bool | None = None  # dense: L2-normalise the final vectors (false: raw dot product, 003 Eq. 2/5); null = as
    # the checkpoint does (a SentenceTransformer folder's Normalize module), else true
    head: str = "classifier"  # cross: classifier (BERT's pooler + linear, transformers' layout) | cls_linear | dual_pooled
    dual_pooling: str = "cls_sep"  # cross with head dual_pooled (004 App. B): cls_sep (Eq. 14) | segment_mean (Eq. 15)


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
class DataConfig:
    dataset: str = "nfcorpus"
    train_split: str = "train"
    validation_split: str | None = "dev"
    test_split: str = "test"
    max_train_queries: int | None = None
    max_positives_per_query: int | None = None
    max_validation_queries: int | None = None
    max_test_queries: int | None = None
    min_relevance: int = 1  # qrels score counted as relevant for training positives
    train: str | None = None  # training rows: a Hugging Face dataset (file, folder, hub id); null: train_split's qrels
    train_format: str = "auto"  # auto | text | ids | scored (teacher scores: margin_mse / listwise_kl)
    train_subset: str | None = None  # data.train from the hub: the dataset's configuration (subset) name
    negatives: str = "bm25"  # bm25 | random
    num_negatives: int = 1  # per training example (001 trains on triplets: 1 negative); 0: in-batch negatives alone
    negatives_depth: int = 100  # BM25 negatives are drawn from this top-k minus the positives
    sample_seed: int = 0  # which queries a max_*_queries subsample keeps
    fold: str | None = None  # the fold these splits are (a K-fold sweep sets it); tables average folds per seed (001 §4.1)


@dataclass
class EvalConfig:
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


@dataclass
class GeneratedQueriesConfig:
    """004 §4.3 / App. E: queries generated from the training queries by a seq2seq model, x' = Dec(Enc(x) + eps), once
    before training (``ssft.data.query_generation``); they enter the query embedding matching loss only (Eq. 7 on Q')."""

    model: str = ""  # hub id / folder of a transformers encoder-decoder (004: BART-base)
    per_query: int = 2  # generated queries per training query (App. E: two)
    sigma: float = 0.1  # std of the isotropic Gaussian noise on the encoder states (§5: 0.1 or 0.2)
    mask_probability: float = 0.1  # each query token replaced by the mask token with this probability (§5: 10 %)
    max_length: int = 32  # new tokens decoded at most
    decoding: str = "greedy"  # greedy | sample
    weight: float = 1.0  # of Eq. 7 on the generated queries
    seed: int = 0  # the masks, the noise (and sampling) are drawn from this seed


@dataclass
class DistillationConfig:
    """A teacher and the distillation objective (``ssft.training.distillation``); absent = no distillation."""

    teacher: str = ""  # hub id / folder of a transformers model (a sentence embedder), or a saved ssft model
    teacher_kind: str = "dense"  # dense | cross_dual_pooled (CE -> DE, 004 §4.2)
    teacher_pooling: str = "mean"  # dense teacher by name: mean | cls; cross_dual_pooled: cls_sep | segment_mean
    # true: 20 x cosine; false: the raw dot product (002's msmarco-*-dot; 004 App. B's CE proxies); null = as the teacher
    # scores: a dense teacher by name 20 x cosine (sentence-transformers' cosine models), a cross-encoder the inner
    # product of its proxies (004 App. B)
    teacher_normalize: bool | None = None
    inherit_documents: bool = False  # asymmetric student: the teacher encodes the documents, only queries train
    query_only: bool = False  # train on query texts alone (002): needs inherit_documents
    query_splits: list[str] = field(default_factory=lambda: ["train"])  # query_only: the queries of these qrels splits
    one_hot_weight: float = 1.0  # the recipe's loss on the student's scores (004 Eq. 9)
    score_weight: float = 1.0  # score distillation (004 Eq. 11-13)
    score_loss: str = "softmax_ce"  # softmax_ce (Eq. 11) | bce (Eq. 12) | mse (Eq. 13)
    temperature: float = 1.0  # softmax_ce
    query_embedding_weight: float = 1.0  # query embedding matching (004 Eq. 7; 002)
    document_embedding_weight: float = 0.0  # document embedding matching (004 Eq. 8; a student with its own documents)
    embedding_distance: str = "l2"  # l2 (Eq. 7-8, 002 §2.2) | mse (002 §3.3)
    keep_teacher_corpus: bool = True  # fill the teacher's document embeddings from its (cached) corpus index first
    generated_queries: GeneratedQueriesConfig | None = None  # 004 §4.3 / App. E: extra queries for Eq. 7 only


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
            "model": dataclasses.asdict(self.model),
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


SEED_RANGE = 2 ** 32  # numpy, torch and random all take seeds in [0, 2**32)


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
    recipe.model = parse_dataclass(ModelConfig, raw.get("model"), f"{source}: model")
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
    recipe.training = _training_section(raw.get("training"), source)
    if raw.get("distillation") is not None:
        recipe.distillation = parse_dataclass(DistillationConfig, raw["distillation"], f"{source}: distillation")
        generated = recipe.distillation.generated_queries
        if generated is not None:
            recipe.distillation.generated_queries = parse_dataclass(GeneratedQueriesConfig, generated,
                                                                    f"{source}: distillation.generated_queries")
    _expand_paths(recipe)
    _validate_numbers(recipe, source)
    _validate_report_to(recipe.training, source)
    _validate_semantics(recipe, source)
    return recipe


# training.report_to name -> (transformers' check that it can run, the pip package to install)
REPORTERS = {
    "azure_ml": ("is_azureml_available", "azureml-core"), "clearml": ("is_clearml_available", "clearml"),
    "codecarbon": ("is_codecarbon_available", "codecarbon"), "comet_ml": ("is_comet_available", "comet-ml"),
    "dagshub": ("is_dagshub_available", "dagshub mlflow"), "dvclive": ("is_dvclive_available", "dvclive"),
    "flyte": ("is_flytekit_available", "flytekit"), "kubeflow": ("is_kubeflow_available", "kubeflow"),
    "mlflow": ("is_mlflow_available", "mlflow"), "neptune": ("is_neptune_available", "neptune"),
    "swanlab": ("is_swanlab_available", "swanlab"), "tensorboard": ("is_tensorboard_available", "tensorboard"),
    "trackio": ("is_trackio_available", "trackio"), "wandb": ("is_wandb_available", "wandb"),
}


def _validate_report_to(training: dict[str, Any], source: str) -> None:
    """training.report_to names integrations transformers knows and that can run here (installed): the Trainer builds
    their callbacks only after the data and the first stage, and dies there with a traceback."""
    value = training.get("report_to")
    if value is None or value in ("none", "all", ["none"], ["all"]):  # "all": those installed
        return
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise SsftError(f"{source}: training.report_to: expected a name or a list of names ({', '.join(REPORTERS)}, "
                        f"all, none), got {value!r}")
    known = set(REPORTERS) & set(integration_utils.INTEGRATION_TO_CALLBACK)
    for name in names:
        if name not in known:
            raise SsftError(f"{source}: training.report_to: unknown integration '{name}'{closest(name, known)}; known: "
                            f"{', '.join(sorted(known))}, all, none")
        check, package = REPORTERS[name]
        if not getattr(integration_utils, check)():
            if name == "kubeflow":
                raise SsftError(f"{source}: training.report_to: 'kubeflow' reports only inside a Kubeflow TrainJob "
                                f"(KUBEFLOW_TRAINER_SERVER_URL is not set)")
            raise SsftError(f"{source}: training.report_to: '{name}' is not installed here (pip install {package}), "
                            f"or is switched off; install it or remove it from training.report_to")


def _expand_paths(recipe: Recipe) -> None:
    """``~`` in a path-valued key is the home folder, once, here: every later reader sees the same path (an
    unexpanded ``~/runs`` was ``./~/runs`` to some and ``$HOME/runs`` to others)."""
    def expand(value):
        return os.path.expanduser(value) if isinstance(value, str) and value.startswith("~") else value

    m, d, e = recipe.model, recipe.data, recipe.eval
    m.name, m.document_name = expand(m.name), expand(m.document_name)
    d.dataset = expand(d.dataset)
    e.first_stage, e.validation_first_stage = expand(e.first_stage), expand(e.validation_first_stage)
    if "teacher" in recipe.loss.options:
        recipe.loss.options["teacher"] = expand(recipe.loss.options["teacher"])
    if recipe.distillation is not None:
        recipe.distillation.teacher = expand(recipe.distillation.teacher)
        if recipe.distillation.generated_queries is not None:
            recipe.distillation.generated_queries.model = expand(recipe.distillation.generated_queries.model)
    recipe.training["output_dir"] = expand(recipe.training["output_dir"])  # outputs and checkpoints in one folder


def _validate_numbers(recipe: Recipe, source: str) -> None:
    """Values that would crash deep inside training or quietly train something else (float fields are finite
    already: ``ssft.config.parse.coerce``)."""
    t = recipe.training

    def at_least_one(where: str, value) -> None:
        if value is not None and value < 1:
            raise SsftError(f"{source}: {where}: must be >= 1, got {value}")

    def non_negative(where: str, value) -> None:
        if value is not None and value < 0:
            raise SsftError(f"{source}: {where}: must be >= 0, got {value}")

    def seed(where: str, value) -> None:
        if value is not None and not 0 <= value < SEED_RANGE:
            raise SsftError(f"{source}: {where}: must be in [0, 2**32), got {value}")

    seed("seed", recipe.seed)
    seed("data.sample_seed", recipe.data.sample_seed)
    for key in ("seed", "data_seed"):
        seed(f"training.{key}", t.get(key))
    for key in ("per_device_train_batch_size", "per_device_eval_batch_size", "gradient_accumulation_steps"):
        at_least_one(f"training.{key}", t.get(key))
    at_least_one("eval.batch_size", recipe.eval.batch_size)
    non_negative("training.learning_rate", t.get("learning_rate"))
    non_negative("model.head_learning_rate", recipe.model.head_learning_rate)
    non_negative("training.num_train_epochs", t.get("num_train_epochs"))
    max_steps = t.get("max_steps")
    if max_steps is not None and (max_steps == 0 or max_steps < -1):
        raise SsftError(f"{source}: training.max_steps: must be >= 1, or -1 to train training.num_train_epochs; "
                        f"got {max_steps}")
    if t.get("num_train_epochs") == 0 and not (max_steps or 0) > 0:
        raise SsftError(f"{source}: training.num_train_epochs: 0 epochs trains nothing; set it > 0 "
                        f"(or training.max_steps)")
    _validate_scheduler_kwargs(t, source)


def _validate_scheduler_kwargs(training: dict[str, Any], source: str) -> None:
    """training.lr_scheduler_kwargs: a mapping the chosen scheduler accepts, checked by building that scheduler
    on a dummy optimizer (an unknown type is left to TrainingArguments, which names it)."""
    where = f"{source}: training.lr_scheduler_kwargs"
    kwargs = training.get("lr_scheduler_kwargs")
    if kwargs is None:
        return
    if isinstance(kwargs, str) and kwargs.startswith("{"):  # TrainingArguments reads such a JSON string too
        try:
            kwargs = json.loads(kwargs)
        except json.JSONDecodeError as err:
            raise SsftError(f"{where}: invalid JSON: {err.msg}") from None
    if not isinstance(kwargs, dict):
        raise SsftError(f"{where}: expected a mapping of scheduler arguments, got {kwargs!r}")
    if not kwargs:
        return
    kind = training.get("lr_scheduler_type", "linear")
    try:
        kind = SchedulerType(kind)
    except ValueError:
        return
    if kind in (SchedulerType.CONSTANT, SchedulerType.CONSTANT_WITH_WARMUP):  # get_scheduler drops them silently
        raise SsftError(f"{where}: lr_scheduler_type '{kind.value}' takes no arguments, got {', '.join(map(str, kwargs))}")
    params = inspect.signature(TYPE_TO_SCHEDULER_FUNCTION[kind]).parameters
    if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        accepted = [n for n in params if n not in ("optimizer", "num_warmup_steps", "num_training_steps", "last_epoch")]
        for key in kwargs:
            if key not in accepted:
                raise SsftError(f"{where}: '{key}' is not an argument of lr_scheduler_type '{kind.value}'"
                                f"{closest(str(key), accepted)}; it takes: {', '.join(accepted) or 'none'}")
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    try:
        scheduler = get_scheduler(kind, optimizer, num_warmup_steps=2, num_training_steps=10,
                                  scheduler_specific_kwargs=dict(kwargs))
        rates = [float(f(step)) for f in getattr(scheduler, "lr_lambdas", []) for step in range(11)]
    except Exception as err:  # noqa: BLE001  whatever the scheduler raises on its arguments
        raise SsftError(f"{where}: lr_scheduler_type '{kind.value}' does not accept {kwargs}: "
                        f"{type(err).__name__}: {(str(err).strip().splitlines() or [''])[0]}") from None
    if not all(math.isfinite(r) and r >= 0 for r in rates):
        raise SsftError(f"{where}: {kwargs} gives lr_scheduler_type '{kind.value}' learning-rate factors that are "
                        f"negative or not finite")


def check_model(recipe: Recipe) -> None:
    """What the recipe asks of its model(s), read offline from config.json before any data work or output: the
    model is found (an SsftError saying where ssft looked, otherwise) and ``model.max_length`` /
    ``model.query_max_length`` fit its position embeddings (longer inputs crash mid-training, or index past them)."""
    m = recipe.model
    separate = "document_name" in MODELS.get(m.architecture, f"{recipe.source}: model.architecture").model_options
    if separate and m.document_name is not None:  # two towers: queries and documents
        towers = [("model.name", m.name, ["query_max_length"]), ("model.document_name", m.document_name, ["max_length"])]
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


def _training_section(value, source: str) -> dict[str, Any]:
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise SsftError(f"{source}: training: expected a mapping, got {type(value).__name__}")
    fields = {f.name: f for f in dataclasses.fields(TrainingArguments) if f.init}
    for key in value:
        if key not in fields:
            raise SsftError(f"{source}: unknown key 'training.{key}'{closest(str(key), fields)} "
                            f"(training takes TrainingArguments fields)")
    out = dict(value)
    hints = typing.get_type_hints(TrainingArguments)
    for key, val in out.items():
        target = plain_type(hints.get(key))
        if key == "bf16" and isinstance(val, str) and val.strip().lower() == "auto":
            out[key] = "auto"  # resolved by the run (ssft.pipeline.run.prepare): bf16 where the hardware has it
            continue
        if target in (int, float, bool) and val is not None:
            try:
                out[key] = coerce(val, target, f"{source}: training.{key}")
            except SsftError as err:
                if key != "bf16":
                    raise
                raise SsftError(f"{err} (or auto: bf16 where the hardware computes it natively)") from None
    out.setdefault("output_dir", "runs/" + Path(source).stem)
    output_dir = out["output_dir"]
    if isinstance(output_dir, int) and not isinstance(output_dir, bool):
        output_dir = str(output_dir)
    if not isinstance(output_dir, str) or not output_dir.strip():
        raise SsftError(f"{source}: training.output_dir: expected a folder path, got {output_dir!r}")
    out["output_dir"] = output_dir  # ~ expanded with the other paths (_expand_paths)
    return out




# ---------------------------------------------------------------- what the sections ask of each other


def _callback_class(entry: Any, where: str):
    """The class a ``callbacks`` entry names (an unknown name: the registry's one-line error)."""
    return CALLBACKS.get(entry if isinstance(entry, str) else entry["name"], where)


def _callback_options(entry: Any) -> dict[str, Any]:
    return {} if isinstance(entry, str) else {k: v for k, v in entry.items() if k != "name"}


def _either(names: list[str]) -> str:
    """'a', 'a' or 'b', 'a', 'b' or 'c'."""
    quoted = [f"'{n}'" for n in names]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"


def _validate_semantics(recipe: Recipe, source: str) -> None:
    model_cls = MODELS.get(recipe.model.architecture, f"{source}: model.architecture")
    adapter_cls = ADAPTERS.get(recipe.adapter.method, f"{source}: adapter.method")
    adapter_config = recipe.adapter.parse(f"{source}: adapter")  # the method's typed config: keys, types, values
    loss_cls = LOSSES.get(recipe.loss.name, f"{source}: loss.name")
    recipe.loss.parse(f"{source}: loss")
    _validate_teacher_loss(recipe, source, model_cls, loss_cls)
    for entry in recipe.callbacks:  # the name, and its options through the callback's own config
        _callback_class(entry, f"{source}: callbacks").config_from(_callback_options(entry), f"{source}: callbacks")
    d, e, m = recipe.data, recipe.eval, recipe.model
    if d.negatives not in NEGATIVES:
        raise SsftError(f"{source}: data.negatives: expected {_either(list(NEGATIVES))}, got '{d.negatives}'")
    if d.negatives_depth < 1:
        raise SsftError(f"{source}: data.negatives_depth: must be >= 1")
    _validate_training_data(recipe, source, model_cls, loss_cls)
    for key in ("max_train_queries", "max_positives_per_query", "max_validation_queries", "max_test_queries"):
        val = getattr(d, key)
        if val is not None and val < 1:
            raise SsftError(f"{source}: data.{key}: must be >= 1 or null")
    if e.depth < 1 or (e.validation_depth is not None and e.validation_depth < 1):
        raise SsftError(f"{source}: eval.depth: must be >= 1")
    if m.max_length < 8 or m.query_max_length < 1:
        raise SsftError(f"{source}: model.max_length: too small")
    if m.pooling not in POOLINGS:
        raise SsftError(f"{source}: model.pooling: expected one of {', '.join(POOLINGS)}, got '{m.pooling}'")
    if m.head not in CROSS_HEADS:
        raise SsftError(f"{source}: model.head: expected one of {', '.join(CROSS_HEADS)}, got '{m.head}'")
    if m.dual_pooling not in DUAL_POOLINGS:
        raise SsftError(f"{source}: model.dual_pooling: expected {' or '.join(DUAL_POOLINGS)}, got '{m.dual_pooling}'")
    if m.dual_pooling != ModelConfig.dual_pooling and m.head != "dual_pooled":
        raise SsftError(f"{source}: model.dual_pooling: only with model.head: dual_pooled, not '{m.head}'")
    _validate_reconstruction(recipe, source, model_cls)
    if m.scorer not in SCORERS:
        raise SsftError(f"{source}: model.scorer: expected one of {', '.join(SCORERS)}, got '{m.scorer}'")
    if adapter_cls.needs_towers and not model_cls.bi_encoder:
        raise SsftError(f"{source}: adapter.method: '{recipe.adapter.method}' is semi-Siamese (query and document towers); "
                        f"it needs a bi-encoder model.architecture (twin, colbert), not '{m.architecture}'")
    for key, method in adapter_cls.parts(adapter_config):  # a hybrid's first and second methods
        if ADAPTERS.get(method, f"{source}: adapter.{key}.method").needs_towers and not model_cls.bi_encoder:
            raise SsftError(f"{source}: adapter.{key}.method: '{method}' is semi-Siamese; it needs a bi-encoder "
                            f"model.architecture (twin, colbert), not '{m.architecture}'")
    if adapter_cls.trains_in_phases:
        for key in ("num_train_epochs", "max_steps"):
            if key in recipe.training:
                raise SsftError(f"{source}: training.{key}: a hybrid sets its epochs per phase "
                                f"(adapter.first_epochs, adapter.second_epochs); remove training.{key}")
    if m.colbert_dim < 1:
        raise SsftError(f"{source}: model.colbert_dim: must be >= 1")
    _validate_model_keys(recipe, source, model_cls, adapter_cls)
    _validate_fusion(recipe, source, model_cls)
    _validate_distillation(recipe, source, model_cls, adapter_cls, loss_cls)
    for entry in recipe.callbacks:  # what a callback needs of the training section (e.g. DAFT's epochs)
        callback = _callback_class(entry, f"{source}: callbacks")
        problem = callback.training_problem(callback.config_from(_callback_options(entry), f"{source}: callbacks"),
                                            recipe.training)
        if problem:
            raise SsftError(f"{source}: callbacks.{callback.name}: {problem}")
    if isinstance(e.interpolation, str) and e.interpolation != "auto":
        raise SsftError(f"{source}: eval.interpolation: expected a number in [0, 1] or 'auto', got '{e.interpolation}'")
    if e.interpolation == "auto" and not d.validation_split:
        raise SsftError(f"{source}: eval.interpolation: 'auto' tunes the weight on data.validation_split, which is not set")
    if isinstance(e.interpolation, float) and not 0.0 <= e.interpolation <= 1.0:
        raise SsftError(f"{source}: eval.interpolation: expected a number in [0, 1], got {e.interpolation}")
    parse_measures(e.metrics, f"{source}: eval.metrics")
    parse_measures([e.selection_metric], f"{source}: eval.selection_metric")
    check_precision(e.precision, f"{source}: eval.precision")


def _validate_reconstruction(recipe: Recipe, source: str, model_cls) -> None:
    """loss.reconstruction_weight (004 §4.2): a ranker whose head carries a token-reconstruction head."""
    weight = recipe.loss.reconstruction_weight
    if weight < 0:
        raise SsftError(f"{source}: loss.reconstruction_weight: must be >= 0, got {weight:g}")
    if weight and (recipe.model.head not in model_cls.reconstruction_heads or "head" not in model_cls.model_options):
        readers = MODELS.matching(lambda c: bool(c.reconstruction_heads))
        heads = sorted({h for name in readers for h in MODELS.get(name).reconstruction_heads})
        raise SsftError(f"{source}: loss.reconstruction_weight: the token reconstruction loss (004 §4.2) trains a "
                        f"model.architecture {_either(readers)} with model.head {_either(heads)}, not "
                        f"'{recipe.model.architecture}' with head '{recipe.model.head}'")


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
    if d.num_negatives < 0:
        raise SsftError(f"{source}: data.num_negatives: must be >= 0")
    if d.train_format not in TRAIN_FORMS:
        raise SsftError(f"{source}: data.train_format: expected {_either(list(TRAIN_FORMS))}, got '{d.train_format}'")
    if d.train is None and (d.train_format != "auto" or d.train_subset is not None):
        raise SsftError(f"{source}: data.train_format / data.train_subset: only with data.train (a dataset of training rows)")
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


# what every architecture reads; the other ModelConfig keys belong to the architectures whose Ranker.model_options list them
COMMON_MODEL_KEYS = ("architecture", "name", "max_length", "query_max_length", "head_learning_rate", "trust_remote_code")


def _validate_model_keys(recipe: Recipe, source: str, model_cls, adapter_cls) -> None:
    """Model keys that only some architectures read (``Ranker.model_options``), and what they cannot combine with."""
    m = recipe.model
    defaults = ModelConfig()
    for key in (f.name for f in dataclasses.fields(ModelConfig)):
        # a key only other architectures read, set to anything but its default, would change nothing: refused
        if key in COMMON_MODEL_KEYS or key in model_cls.model_options or getattr(m, key) == getattr(defaults, key):
            continue
        readers = MODELS.matching(lambda c, key=key: key in c.model_options)
        raise SsftError(f"{source}: model.{key}: only for model.architecture {_either(readers)}, not '{m.architecture}'")
    options = model_cls.model_options
    if "query_layers" in options:
        if isinstance(m.query_layers, int) and m.query_layers < 1:
            raise SsftError(f"{source}: model.query_layers: must be >= 1, a list of layer indices, or null")
        if isinstance(m.query_layers, list) and (not m.query_layers or m.query_layers != sorted(set(m.query_layers))
                                                 or m.query_layers[0] < 0):
            raise SsftError(f"{source}: model.query_layers: a list of layers must be increasing distinct indices >= 0, "
                            f"got {m.query_layers}")
    if "projection_dim" in options and m.projection_dim is not None and m.projection_dim < 1:
        raise SsftError(f"{source}: model.projection_dim: must be >= 1 or null")
    if "score_scale" in options and m.score_scale <= 0:
        raise SsftError(f"{source}: model.score_scale: must be > 0")
    if "document_name" not in options:
        return
    if m.document_name is not None and adapter_cls.one_backbone_only:
        allowed = ADAPTERS.matching(lambda c: not c.one_backbone_only)
        raise SsftError(f"{source}: adapter.method: '{recipe.adapter.method}' needs one shared backbone; "
                        f"with model.document_name set use {', '.join(allowed[:-1])} or {allowed[-1]}")
    for entry in recipe.callbacks:
        callback = _callback_class(entry, f"{source}: callbacks")
        if callback.needs_document_tower and m.document_name is None:
            raise SsftError(f"{source}: callbacks: '{callback.name}' aligns a separate query tower to a frozen document "
                            f"tower; set model.document_name (the same name as model.name gives two separate copies)")


def _validate_distillation(recipe: Recipe, source: str, model_cls, adapter_cls, loss_cls) -> None:
    """The ``distillation`` section: what it needs and what it cannot combine with."""
    k = recipe.distillation
    if k is None:
        return
    where = f"{source}: distillation"
    if not k.teacher:
        raise SsftError(f"{where}.teacher: name the teacher (a hub id or folder of a sentence embedder, or a saved ssft "
                        f"dense model)")
    if not model_cls.distillation_student:
        students = MODELS.matching(lambda c: c.distillation_student)
        raise SsftError(f"{where}: the student must be model.architecture {_either(students)}, "
                        f"not '{recipe.model.architecture}'")
    if loss_cls.needs_teacher:
        raise SsftError(f"{where}: loss '{recipe.loss.name}' has its own in-loop teacher (loss.teacher); use one or the other")
    if k.teacher_kind not in TEACHER_KINDS:
        raise SsftError(f"{where}.teacher_kind: expected {_either(list(TEACHER_KINDS))}, got '{k.teacher_kind}'")
    poolings = POOLINGS if k.teacher_kind == "dense" else DUAL_POOLINGS
    if k.teacher_pooling not in poolings:
        raise SsftError(f"{where}.teacher_pooling: a {k.teacher_kind} teacher pools {' or '.join(poolings)}, "
                        f"got '{k.teacher_pooling}'")
    if k.teacher_kind == "cross_dual_pooled" and k.query_only:
        # its query proxy is computed with a document (Eq. 14 / 15 pool the pair): a query alone has none to match
        raise SsftError(f"{where}.query_only: a cross-encoder teacher's query embedding depends on the document it is "
                        f"paired with; train on (query, document) groups (query_only: false)")
    if k.score_loss not in SCORE_LOSSES:
        raise SsftError(f"{where}.score_loss: expected one of {', '.join(SCORE_LOSSES)}, got '{k.score_loss}'")
    if k.embedding_distance not in EMBEDDING_DISTANCES:
        raise SsftError(f"{where}.embedding_distance: expected one of {', '.join(EMBEDDING_DISTANCES)}, "
                        f"got '{k.embedding_distance}'")
    if k.temperature <= 0:
        raise SsftError(f"{where}.temperature: must be > 0")
    weights = ("one_hot_weight", "score_weight", "query_embedding_weight", "document_embedding_weight")
    for key in weights:
        if getattr(k, key) < 0:
            raise SsftError(f"{where}.{key}: must be >= 0")
    if k.query_only:
        if not k.inherit_documents:
            raise SsftError(f"{where}.query_only: a student trained on queries alone serves against the teacher's "
                            f"documents; set distillation.inherit_documents: true")
        if not k.query_embedding_weight:
            raise SsftError(f"{where}.query_only: the only loss is query embedding matching; query_embedding_weight "
                            f"must be > 0")
        if not k.query_splits:
            raise SsftError(f"{where}.query_splits: name at least one split whose queries train the student")
        if recipe.data.test_split in k.query_splits:
            raise SsftError(f"{where}.query_splits: '{recipe.data.test_split}' is data.test_split; its queries must not "
                            f"train the student")
    elif not any(getattr(k, key) for key in weights):
        raise SsftError(f"{where}: every loss weight is 0")
    if k.inherit_documents:
        if recipe.model.document_name is not None:
            raise SsftError(f"{where}.inherit_documents: the student inherits the teacher's documents; "
                            f"model.document_name must be null")
        if k.document_embedding_weight:
            raise SsftError(f"{where}.document_embedding_weight: an inherited document encoder is the teacher's own "
                            f"(Eq. 8 is 0); set it to 0")
    if k.generated_queries is not None:
        _validate_generated_queries(k.generated_queries, f"{where}.generated_queries", k)
    if adapter_cls.trains_in_phases:
        raise SsftError(f"{where}: a hybrid schedule does not combine with distillation; use one adapter.method")
    for entry in recipe.callbacks:
        callback = _callback_class(entry, f"{source}: callbacks")
        if not callback.combines_with_distillation:
            raise SsftError(f"{source}: callbacks: '{callback.name}' does not combine with distillation (the teacher "
                            f"scores only the batch's documents)")


def _validate_generated_queries(g: GeneratedQueriesConfig, where: str, k: DistillationConfig) -> None:
    """distillation.generated_queries (004 App. E)."""
    if not g.model:
        raise SsftError(f"{where}.model: name the seq2seq generator (a hub id or folder, e.g. facebook/bart-base)")
    if g.per_query < 1:
        raise SsftError(f"{where}.per_query: must be >= 1, got {g.per_query}")
    if g.sigma < 0:
        raise SsftError(f"{where}.sigma: must be >= 0, got {g.sigma:g}")
    if not 0.0 <= g.mask_probability < 1.0:
        raise SsftError(f"{where}.mask_probability: must be in [0, 1), got {g.mask_probability:g}")
    if g.max_length < 1:
        raise SsftError(f"{where}.max_length: must be >= 1, got {g.max_length}")
    if g.decoding not in GENERATION_DECODINGS:
        raise SsftError(f"{where}.decoding: expected {_either(list(GENERATION_DECODINGS))}, got '{g.decoding}'"
                        f"{closest(g.decoding, GENERATION_DECODINGS)}")
    if g.weight <= 0:
        raise SsftError(f"{where}.weight: must be > 0 (remove generated_queries to train without them), got {g.weight:g}")
    if not 0 <= g.seed < SEED_RANGE:
        raise SsftError(f"{where}.seed: must be in [0, 2**32), got {g.seed}")


__all__ = ["DEFAULT_METRICS", "SEED_RANGE", "YAML_MAX_VALUES", "AdapterSection", "DataConfig", "DistillationConfig",
           "EvalConfig", "GeneratedQueriesConfig", "LossSection", "ModelConfig", "Recipe", "apply_override", "check_model",
           "load_recipe", "recipe_from_dict", "safe_load_strict"]

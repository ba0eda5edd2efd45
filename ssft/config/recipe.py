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
"""
from __future__ import annotations

import dataclasses
import math
import os
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ssft.core.errors import SsftError, closest

DEFAULT_METRICS = ["P@20", "nDCG@5", "nDCG@10", "nDCG@20", "RR@10", "R@100"]


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
    query_layers: int | list[int] | None = None  # dense: N = the first N layers of the query tower, or a list of layers
    projection_dim: int | None = None  # dense: shared projection size a (000 Eq. 10-11); null = none
    score_scale: float = 20.0  # dense: scores are scale * dot product of the L2-normalised vectors


@dataclass
class AdapterSection:
    method: str = "full"
    options: dict[str, Any] = field(default_factory=dict)  # validated by the adapter's own config class


@dataclass
class LossSection:
    name: str = "pairwise_softmax"
    options: dict[str, Any] = field(default_factory=dict)


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
    negatives: str = "bm25"  # bm25 | random
    num_negatives: int = 1  # per training example (001 trains on triplets: 1 negative)
    negatives_depth: int = 100  # BM25 negatives are drawn from this top-k minus the positives
    sample_seed: int = 0  # which queries a max_*_queries subsample keeps


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


@dataclass
class DistillationConfig:
    """A teacher and the distillation objective (``ssft.training.distillation``); absent = no distillation."""

    teacher: str = ""  # hub id / folder of a transformers model (a sentence embedder), or a saved ssft model
    teacher_kind: str = "dense"  # dense | cross_dual_pooled (CE -> DE, 004 §4.2)
    teacher_pooling: str = "mean"  # dense teacher by name: mean | cls; cross_dual_pooled: cls_sep | segment_mean
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
            "loss": {"name": self.loss.name, **self.loss.options},
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


# ---------------------------------------------------------------- strict YAML

YAML_MAX_VALUES = 100_000  # values a YAML document may expand to through aliases (a recipe has a few hundred)
SEED_RANGE = 2 ** 32  # numpy, torch and random all take seeds in [0, 2**32)


class _StrictLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses duplicate keys in a mapping (YAML keeps the last one silently: ``adapter:``
    given twice became the other method) and documents that expand past ``YAML_MAX_VALUES`` values through
    aliases (a 1 kB "billion laughs" file is gigabytes once expanded), or that contain themselves."""

    source = "<yaml>"
    line_numbers = True
    key_prefix = ""

    def get_single_node(self):
        node = super().get_single_node()
        if node is not None:
            _check_nodes(node, self.source, self.line_numbers, self.key_prefix)
        return node


def _check_nodes(root, source: str, line_numbers: bool, prefix: str = "") -> None:
    """Duplicate keys and the expanded size of the node graph (aliases are shared nodes: memoised, so linear)."""
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def where(node, path: str) -> str:
        line = f":{node.start_mark.line + 1}" if line_numbers and node.start_mark is not None else ""
        return f"{source}{line}: {path or '<top level>'}"

    def visit(node, path: str) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in active:
            raise SsftError(f"{where(node, path)}: a YAML alias (*name) refers to a value that contains it; refused")
        active.add(key)
        size = 1
        if isinstance(node, yaml.MappingNode):
            seen: dict[tuple[str, str], Any] = {}
            for key_node, value_node in node.value:
                name = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
                child = f"{path}.{name}" if path and name is not None else (name if name is not None else path)
                if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                    previous = seen.get((key_node.tag, name))
                    if previous is not None:
                        first = f" (first given on line {previous.start_mark.line + 1})" if line_numbers else ""
                        raise SsftError(f"{where(key_node, child)}: duplicate key{first}; YAML would silently keep "
                                        f"only the last one, remove the other")
                    seen[(key_node.tag, name)] = key_node
                size += visit(key_node, child) + visit(value_node, child)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                size += visit(item, f"{path}[{i}]")
        if size > YAML_MAX_VALUES:
            raise SsftError(f"{where(node, path)}: expands to more than {YAML_MAX_VALUES:,} values through YAML "
                            f"aliases (*name); refused")
        active.discard(key)
        sizes[key] = size
        return size

    visit(root, prefix)


def safe_load_strict(text: str, source: str, line_numbers: bool = True, key_prefix: str = "") -> Any:
    """``yaml.safe_load`` of ``text`` that also refuses duplicate keys and alias bombs (one-line SsftErrors naming
    ``source``, its line when ``line_numbers``, and the key, below ``key_prefix`` for an override's value).
    Malformed YAML raises ``yaml.YAMLError`` as before."""
    loader = _StrictLoader(text)
    loader.source, loader.line_numbers, loader.key_prefix = source, line_numbers, key_prefix
    try:
        return loader.get_single_data()
    except RecursionError:
        raise SsftError(f"{source}: YAML nested too deeply") from None
    finally:
        loader.dispose()


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
    recipe.seed = _coerce(raw.get("seed", 42), int, f"{source}: seed")
    recipe.model = _dataclass_from(ModelConfig, raw.get("model"), f"{source}: model")
    recipe.data = _dataclass_from(DataConfig, raw.get("data"), f"{source}: data")
    recipe.eval = _dataclass_from(EvalConfig, raw.get("eval"), f"{source}: eval")
    recipe.adapter = _named_section(AdapterSection, raw.get("adapter"), "method", "full", f"{source}: adapter")
    recipe.loss = _named_section(LossSection, raw.get("loss"), "name", "pairwise_softmax", f"{source}: loss")
    callbacks = raw.get("callbacks") or []
    if not isinstance(callbacks, list) or not all(
            isinstance(c, str) or (isinstance(c, dict) and isinstance(c.get("name"), str)) for c in callbacks):
        raise SsftError(f"{source}: callbacks must be a list of names, or of mappings {{name: ..., option: value}}")
    recipe.callbacks = callbacks
    recipe.training = _training_section(raw.get("training"), source)
    if raw.get("distillation") is not None:
        recipe.distillation = _dataclass_from(DistillationConfig, raw["distillation"], f"{source}: distillation")
    _expand_paths(recipe)
    _validate_numbers(recipe, source)
    _validate_semantics(recipe, source)
    return recipe


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
    recipe.training["output_dir"] = expand(recipe.training["output_dir"])  # outputs and checkpoints in one folder


def _validate_numbers(recipe: Recipe, source: str) -> None:
    """Values that would crash deep inside training or quietly train something else (float fields are finite
    already: ``_coerce``)."""
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
    import inspect
    import json

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
    from transformers.optimization import TYPE_TO_SCHEDULER_FUNCTION, SchedulerType, get_scheduler

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
    import torch

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
    from ssft.models.hub import max_input_length, resolve_model

    m = recipe.model
    if m.architecture == "dense" and m.document_name is not None:  # two towers: queries and documents
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
    from transformers import TrainingArguments

    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise SsftError(f"{source}: training: expected a mapping, got {type(value).__name__}")
    fields = {f.name: f for f in dataclasses.fields(TrainingArguments) if f.init}
    for key in value:
        if key not in fields:
            raise SsftError(f"{source}: unknown key 'training.{key}'{closest(str(key), fields)} (training takes TrainingArguments fields)")
    out = dict(value)
    hints = typing.get_type_hints(TrainingArguments)
    for key, val in out.items():
        target = _plain_type(hints.get(key))
        if target in (int, float, bool) and val is not None:
            out[key] = _coerce(val, target, f"{source}: training.{key}")
    out.setdefault("output_dir", "runs/" + Path(source).stem)
    output_dir = out["output_dir"]
    if isinstance(output_dir, int) and not isinstance(output_dir, bool):
        output_dir = str(output_dir)
    if not isinstance(output_dir, str) or not output_dir.strip():
        raise SsftError(f"{source}: training.output_dir: expected a folder path, got {output_dir!r}")
    out["output_dir"] = output_dir  # ~ expanded with the other paths (_expand_paths)
    return out


def _plain_type(hint):
    """int/float/bool/str for simple (optional) annotations, else None."""
    args = typing.get_args(hint)
    if args and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        hint = rest[0] if len(rest) == 1 else None
    return hint if hint in (int, float, bool, str) else None


def _dataclass_from(cls, value, where: str):
    if value is None:
        return cls()
    if not isinstance(value, dict):
        raise SsftError(f"{where}: expected a mapping, got {type(value).__name__}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    kwargs = {}
    for key, val in value.items():
        if key not in names:
            raise SsftError(f"{where}: unknown key '{key}'{closest(str(key), names)}; known: {', '.join(names)}")
        kwargs[key] = _check_type(val, hints[key], f"{where}.{key}")
    return cls(**kwargs)


def _check_type(val, hint, where: str):
    """Check/coerce ``val`` against a simple annotation: int, float, str, bool, list[str], unions with None."""
    args = typing.get_args(hint)
    origin = typing.get_origin(hint)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        if val is None and type(None) in args:
            return None
        errors = []
        for option in [a for a in args if a is not type(None)]:
            try:
                return _check_type(val, option, where)
            except SsftError as err:
                errors.append(err)
        raise errors[0]
    if origin is list:
        if isinstance(val, str):
            val = [v.strip() for v in val.split(",") if v.strip()]
        if not isinstance(val, list):
            raise SsftError(f"{where}: expected a list, got {val!r}")
        return [_check_type(v, args[0], where) for v in val]
    if hint is Any:
        return val
    if hint in (int, float, bool):
        return _coerce(val, hint, where)
    if hint is str:
        if not isinstance(val, str):
            raise SsftError(f"{where}: expected a string, got {val!r}")
        return val
    return val


def _coerce(val, target, where: str):
    if target is bool:
        if isinstance(val, bool):
            return val
        if isinstance(val, str) and val.lower() in ("true", "false", "yes", "no"):
            return val.lower() in ("true", "yes")
        raise SsftError(f"{where}: expected true/false, got {val!r}")
    if isinstance(val, bool):
        raise SsftError(f"{where}: expected a number, got {val!r}")
    if target is int:
        if isinstance(val, int):
            return val
        if isinstance(val, float) and val.is_integer():
            return int(val)
        if isinstance(val, str):
            try:
                return int(val)
            except ValueError:
                pass
        raise SsftError(f"{where}: expected an integer, got {val!r}")
    if target is float:
        number = None
        if isinstance(val, (int, float)):
            number = float(val) if isinstance(val, float) or abs(val) < 2 ** 1000 else math.inf  # float(10**400) overflows
        elif isinstance(val, str):  # YAML 1.1 reads 1e-4 as a string
            try:
                number = float(val)
            except ValueError:
                pass
        if number is None:
            raise SsftError(f"{where}: expected a number, got {val!r}")
        if not math.isfinite(number):
            raise SsftError(f"{where}: expected a finite number, got {val!r}")
        return number
    return val


def _validate_semantics(recipe: Recipe, source: str) -> None:
    from ssft.config.registry import ADAPTERS, LOSSES, MODELS, CALLBACKS

    MODELS.get(recipe.model.architecture, f"{source}: model.architecture")
    adapter_cls = ADAPTERS.get(recipe.adapter.method, f"{source}: adapter.method")
    adapter_cls.config_from(recipe.adapter.options, f"{source}: adapter")  # validates keys and types
    loss_cls = LOSSES.get(recipe.loss.name, f"{source}: loss.name")
    loss_cls.from_options(recipe.loss.options, f"{source}: loss")
    _validate_teacher_loss(recipe, source)
    from ssft.training.callbacks import build_callback

    for entry in recipe.callbacks:
        build_callback(entry, f"{source}: callbacks")  # validates the name and its options
    d, e, m = recipe.data, recipe.eval, recipe.model
    if d.negatives not in ("bm25", "random"):
        raise SsftError(f"{source}: data.negatives: expected 'bm25' or 'random', got '{d.negatives}'")
    for key in ("num_negatives", "negatives_depth"):
        if getattr(d, key) < 1:
            raise SsftError(f"{source}: data.{key}: must be >= 1")
    for key in ("max_train_queries", "max_positives_per_query", "max_validation_queries", "max_test_queries"):
        val = getattr(d, key)
        if val is not None and val < 1:
            raise SsftError(f"{source}: data.{key}: must be >= 1 or null")
    if e.depth < 1 or (e.validation_depth is not None and e.validation_depth < 1):
        raise SsftError(f"{source}: eval.depth: must be >= 1")
    if m.max_length < 8 or m.query_max_length < 1:
        raise SsftError(f"{source}: model.max_length: too small")
    from ssft.models.twin import POOLINGS, SCORERS

    if m.pooling not in POOLINGS:
        raise SsftError(f"{source}: model.pooling: expected one of {', '.join(POOLINGS)}, got '{m.pooling}'")
    if m.scorer not in SCORERS:
        raise SsftError(f"{source}: model.scorer: expected one of {', '.join(SCORERS)}, got '{m.scorer}'")
    if recipe.adapter.method in ("ss_lora", "ss_hidden_prefix") and m.architecture == "cross":
        raise SsftError(f"{source}: adapter.method: '{recipe.adapter.method}' is semi-Siamese (query and document towers); "
                        f"it needs a bi-encoder model.architecture (twin, colbert), not 'cross'")
    if recipe.adapter.method == "hybrid":
        hybrid = adapter_cls.config_from(recipe.adapter.options, f"{source}: adapter")
        for key, method in zip(("first", "second"), hybrid.methods):
            if method.startswith("ss_") and m.architecture == "cross":
                raise SsftError(f"{source}: adapter.{key}.method: '{method}' is semi-Siamese; it needs a bi-encoder "
                                f"model.architecture (twin, colbert), not 'cross'")
        for key in ("num_train_epochs", "max_steps"):
            if key in recipe.training:
                raise SsftError(f"{source}: training.{key}: a hybrid sets its epochs per phase "
                                f"(adapter.first_epochs, adapter.second_epochs); remove training.{key}")
    if m.colbert_dim < 1:
        raise SsftError(f"{source}: model.colbert_dim: must be >= 1")
    _validate_dense(recipe, source)
    _validate_fusion(recipe, source)
    _validate_distillation(recipe, source)
    if isinstance(e.interpolation, str) and e.interpolation != "auto":
        raise SsftError(f"{source}: eval.interpolation: expected a number in [0, 1] or 'auto', got '{e.interpolation}'")
    if e.interpolation == "auto" and not d.validation_split:
        raise SsftError(f"{source}: eval.interpolation: 'auto' tunes the weight on data.validation_split, which is not set")
    if isinstance(e.interpolation, float) and not 0.0 <= e.interpolation <= 1.0:
        raise SsftError(f"{source}: eval.interpolation: expected a number in [0, 1], got {e.interpolation}")
    from ssft.eval.metrics import parse_measures

    parse_measures(e.metrics, f"{source}: eval.metrics")
    parse_measures([e.selection_metric], f"{source}: eval.selection_metric")


def _validate_fusion(recipe: Recipe, source: str) -> None:
    """eval.fusion: 003 Eq. 7 fuses a full-retrieval (dense) run with the first stage's."""
    from ssft.config.registry import MODELS

    f = recipe.eval.fusion
    if f is None:
        return
    if not getattr(MODELS.get(recipe.model.architecture), "full_retrieval", False):
        raise SsftError(f"{source}: eval.fusion: dense-sparse fusion (003 Eq. 7) needs a full-retrieval model "
                        f"(model.architecture 'dense'); a reranker has eval.interpolation")
    if isinstance(f, str) and f != "auto":
        raise SsftError(f"{source}: eval.fusion: expected a number >= 0 or 'auto', got '{f}'")
    if f == "auto" and not recipe.data.validation_split:
        raise SsftError(f"{source}: eval.fusion: 'auto' tunes the weight on data.validation_split, which is not set")
    if isinstance(f, float) and f < 0:
        raise SsftError(f"{source}: eval.fusion: expected a number >= 0, got {f}")


def _validate_teacher_loss(recipe: Recipe, source: str) -> None:
    """A loss that distils a teacher in the loop (tct) needs a bi-encoder student and the plain in-batch rows."""
    from ssft.models.bi import BiEncoder
    from ssft.config.registry import LOSSES, MODELS

    if not getattr(LOSSES.get(recipe.loss.name), "needs_teacher", False):
        return
    if not issubclass(MODELS.get(recipe.model.architecture), BiEncoder):
        raise SsftError(f"{source}: loss.name: '{recipe.loss.name}' distils into a bi-encoder student (dense, twin, "
                        f"colbert), not model.architecture '{recipe.model.architecture}'")
    names = [c if isinstance(c, str) else c.get("name") for c in recipe.callbacks]
    if "negative_cache" in names:
        raise SsftError(f"{source}: callbacks: 'negative_cache' adds negatives the teacher never scores; "
                        f"the '{recipe.loss.name}' loss distils over the in-batch documents only")


def _validate_dense(recipe: Recipe, source: str) -> None:
    """Keys that only the dense dual encoder reads, and what it cannot combine with."""
    m = recipe.model
    if m.architecture != "dense":
        for key in ("document_name", "query_layers", "projection_dim"):
            if getattr(m, key) is not None:
                raise SsftError(f"{source}: model.{key}: only for model.architecture 'dense', not '{m.architecture}'")
        return
    if isinstance(m.query_layers, int) and m.query_layers < 1:
        raise SsftError(f"{source}: model.query_layers: must be >= 1, a list of layer indices, or null")
    if isinstance(m.query_layers, list) and (not m.query_layers or m.query_layers != sorted(set(m.query_layers))
                                             or m.query_layers[0] < 0):
        raise SsftError(f"{source}: model.query_layers: a list of layers must be increasing distinct indices >= 0, "
                        f"got {m.query_layers}")
    if m.projection_dim is not None and m.projection_dim < 1:
        raise SsftError(f"{source}: model.projection_dim: must be >= 1 or null")
    if m.score_scale <= 0:
        raise SsftError(f"{source}: model.score_scale: must be > 0")
    from ssft.models.dense import SEPARATE_TOWER_METHODS_REFUSED

    if m.document_name is not None and recipe.adapter.method in SEPARATE_TOWER_METHODS_REFUSED:
        raise SsftError(f"{source}: adapter.method: '{recipe.adapter.method}' needs one shared backbone; "
                        f"with model.document_name set use full, lora, lora++, prefix, prompt or hidden_prefix")
    names = [c if isinstance(c, str) else c.get("name") for c in recipe.callbacks]
    if "daft" in names and m.document_name is None:
        raise SsftError(f"{source}: callbacks: 'daft' aligns a separate query tower to a frozen document tower; "
                        f"set model.document_name (the same name as model.name gives two separate copies)")


def _validate_distillation(recipe: Recipe, source: str) -> None:
    """The ``distillation`` section: what it needs and what it cannot combine with."""
    from ssft.losses.embedding_match import DISTANCES
    from ssft.losses.score_distillation import KINDS

    k = recipe.distillation
    if k is None:
        return
    where = f"{source}: distillation"
    if not k.teacher:
        raise SsftError(f"{where}.teacher: name the teacher (a hub id or folder of a sentence embedder, or a saved ssft dense model)")
    if recipe.model.architecture != "dense":
        raise SsftError(f"{where}: the student must be model.architecture 'dense', not '{recipe.model.architecture}'")
    if recipe.loss.name == "tct":
        raise SsftError(f"{where}: loss 'tct' has its own in-loop teacher (loss.teacher); use one or the other")
    from ssft.teachers.cross import DUAL_POOLINGS
    from ssft.models.twin import POOLINGS

    if k.teacher_kind not in ("dense", "cross_dual_pooled"):
        raise SsftError(f"{where}.teacher_kind: expected 'dense' or 'cross_dual_pooled', got '{k.teacher_kind}'")
    poolings = POOLINGS if k.teacher_kind == "dense" else DUAL_POOLINGS
    if k.teacher_pooling not in poolings:
        raise SsftError(f"{where}.teacher_pooling: a {k.teacher_kind} teacher pools {' or '.join(poolings)}, got '{k.teacher_pooling}'")
    if k.teacher_kind == "cross_dual_pooled" and (k.inherit_documents or k.query_only):
        raise SsftError(f"{where}: a cross-encoder teacher has no document index to inherit and needs (query, document) "
                        f"pairs; set inherit_documents and query_only to false")
    if k.score_loss not in KINDS:
        raise SsftError(f"{where}.score_loss: expected one of {', '.join(KINDS)}, got '{k.score_loss}'")
    if k.embedding_distance not in DISTANCES:
        raise SsftError(f"{where}.embedding_distance: expected one of {', '.join(DISTANCES)}, got '{k.embedding_distance}'")
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
            raise SsftError(f"{where}.query_only: the only loss is query embedding matching; query_embedding_weight must be > 0")
        if not k.query_splits:
            raise SsftError(f"{where}.query_splits: name at least one split whose queries train the student")
        if recipe.data.test_split in k.query_splits:
            raise SsftError(f"{where}.query_splits: '{recipe.data.test_split}' is data.test_split; its queries must not train the student")
    elif not any(getattr(k, key) for key in weights):
        raise SsftError(f"{where}: every loss weight is 0")
    if k.inherit_documents:
        if recipe.model.document_name is not None:
            raise SsftError(f"{where}.inherit_documents: the student inherits the teacher's documents; "
                            f"model.document_name must be null")
        if k.document_embedding_weight:
            raise SsftError(f"{where}.document_embedding_weight: an inherited document encoder is the teacher's own "
                            f"(Eq. 8 is 0); set it to 0")
    if recipe.adapter.method == "hybrid":
        raise SsftError(f"{where}: a hybrid schedule does not combine with distillation; use one adapter.method")
    names = [c if isinstance(c, str) else c.get("name") for c in recipe.callbacks]
    for name in ("negative_cache", "daft"):
        if name in names:
            raise SsftError(f"{source}: callbacks: '{name}' does not combine with distillation (the teacher scores "
                            f"only the batch's documents)")

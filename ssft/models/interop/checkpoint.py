"""What a pretrained checkpoint folder is, and everything it holds beyond a plain transformers encoder.

``read_checkpoint(folder)`` tells the kinds apart and reads, without loading any library but transformers' files:

- ``sequence-classification``: ``config.json`` names a ``*ForSequenceClassification`` architecture (a cross-encoder
  such as ``cross-encoder/ms-marco-MiniLM-L6-v2``, or what ``ssft-export`` writes for ``cross``): its pooler and
  classifier weights are kept for the cross-encoder's ``classifier`` head;
- ``multi-vector``: a sentence-transformers ``MultiVectorEncoder`` / PyLate folder (``config_sentence_transformers.json``
  model_type ``MultiVectorEncoder`` or PyLate's ``ColBERT``): the token projection (a token-level ``Dense``), the
  query / document markers (its prompts or PyLate's ``query_prefix`` / ``document_prefix``), the query length and
  [MASK] expansion (``query_expansion`` or PyLate's ``query_length`` / ``attend_to_expansion_tokens``) and the
  punctuation skiplist;
- ``colbert-stanford``: Stanford's ColBERT (``architectures: [HF_ColBERT]``): ``linear.weight`` beside the encoder,
  settings from ``artifact.metadata``;
- ``sentence-transformers``: a SentenceTransformer folder (``modules.json``): Pooling (mean / cls), Dense and
  Normalize modules and the query / document prompts. A ``Router`` (sentence-transformers 6: ``router_config.json``
  with ``types``, ``structure`` — one module list per route — and ``parameters.route_mappings``; what ``ssft-export``
  writes when a model's query and document towers differ) is read one route at a time: its ``query`` route (or the
  route its mappings give the query task) by default, its ``document`` route on request, each route's modules followed
  by the modules listed after the Router. ``SentenceModules.towers`` names both routes' Transformer folders when they
  differ (two towers: only ``dense`` holds them);
- ``transformers``: anything else (a plain encoder).

Every weight of the checkpoint is accounted for: ``Pretrained.extra`` holds those the transformer did not take;
a ranker takes what it uses (``take``), and ``report`` warns about the rest and about transformer weights the
checkpoint lacked (initialised at random). Nothing is dropped silently.
"""
from __future__ import annotations

import ast
import difflib
import json
import logging
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from ssft.core.errors import SsftError

logger = logging.getLogger("ssft")

KINDS = ("transformers", "sequence-classification", "sentence-transformers", "multi-vector", "colbert-stanford")
PUNCTUATION = list(string.punctuation)
# weights nobody expects a ranker to use: BERT's next-sentence pooler beside a model that does not pool that way,
# and buffers some checkpoints store (position ids)
QUIET_UNUSED = ("pooler.", "embeddings.position_ids")


@dataclass
class DenseModule:
    """A sentence-transformers ``Dense`` module: y = activation(W x + b)."""

    weight: torch.Tensor
    bias: torch.Tensor | None
    activation: str  # the dotted class name, e.g. torch.nn.modules.linear.Identity
    token_level: bool  # module_input_name token_embeddings (a ColBERT projection)

    @property
    def linear(self) -> bool:
        return self.activation.rsplit(".", 1)[-1] == "Identity"


@dataclass
class SentenceModules:
    """The modules of a sentence-transformers folder that change what a transformer's states become."""

    transformer_path: str = ""
    pooling: str | None = None  # mean | cls | another ST mode (max, lasttoken, ... : ssft has none of those)
    include_prompt: bool = True
    dense: list[DenseModule] = field(default_factory=list)
    normalize: bool = False
    skiplist_words: list[str] | None = None  # a MultiVectorMask module's
    prompts: dict[str, str] = field(default_factory=dict)
    transformer_config: dict[str, Any] = field(default_factory=dict)  # sentence_bert_config.json
    other: list[str] = field(default_factory=list)  # modules ssft does not model (LayerNorm, ...)
    route: str | None = None  # the Router route these modules are (its name in router_config.json), None: no Router
    towers: dict[str, str] = field(default_factory=dict)  # {query, document} -> Transformer folder when they differ


@dataclass
class ColbertSettings:
    """How a ColBERT checkpoint tokenises and scores (what ``ssft.models.colbert`` reproduces)."""

    projection: torch.Tensor | None  # (dim, hidden), no bias
    query_marker: str
    document_marker: str
    query_length: int | None  # [MASK] expansion length; None: queries not expanded
    attend_expansion: bool
    mask_punctuation: bool


@dataclass
class Pretrained:
    """A pretrained checkpoint as ssft reads it (see the module docstring)."""

    name: str
    path: Path
    kind: str
    config: dict[str, Any]
    extra: dict[str, torch.Tensor] = field(default_factory=dict)  # checkpoint weights the transformer did not take
    missing: list[str] = field(default_factory=list)  # transformer weights the checkpoint lacked
    modules: SentenceModules | None = None
    colbert: ColbertSettings | None = None
    notes: list[str] = field(default_factory=list)  # what a ranker could not honour (reported with the rest)

    @property
    def two_towers(self) -> bool:
        """A sentence-transformers Router whose query and document routes hold different transformers."""
        return self.modules is not None and bool(self.modules.towers)

    def take(self, key: str) -> torch.Tensor | None:
        """The checkpoint weight ``key`` (its checkpoint name), now used by the ranker; None when absent."""
        return self.extra.pop(key, None)

    def has(self, key: str) -> bool:
        return key in self.extra

    def report(self, quiet: tuple[str, ...] = QUIET_UNUSED) -> list[str]:
        """Warn (log level WARNING) about every checkpoint weight left unused and every weight initialised at random,
        and about whatever a ranker could not honour. ``quiet``: name prefixes of weights that are legitimately unused
        by this ranker (e.g. BERT's pooler beside a mean-pooling bi-encoder). Returns the lines logged."""
        lines = []
        unused = sorted(k for k in self.extra if not _stripped(k, self.config).startswith(quiet))
        if unused:
            lines.append(f"{self.name}: {len(unused)} weight(s) of the checkpoint are not used: {', '.join(unused)}")
        if self.missing:
            lines.append(f"{self.name}: {len(self.missing)} weight(s) not in the checkpoint were initialised at random: "
                         f"{', '.join(sorted(self.missing))}")
        lines.extend(f"{self.name}: {note}" for note in self.notes)
        for line in lines:
            logger.warning(line)
        return lines


def _stripped(key: str, config: dict[str, Any]) -> str:
    """A checkpoint key without the task model's prefix for its encoder (``bert.`` of BertForSequenceClassification)."""
    prefix = _encoder_prefix(config)
    return key[len(prefix) + 1:] if prefix and key.startswith(prefix + ".") else key


def _encoder_prefix(config: dict[str, Any]) -> str:
    model_type = config.get("model_type", "")
    return {"xlm-roberta": "roberta", "distilbert": "distilbert"}.get(model_type, model_type.replace("-", "_"))


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise SsftError(f"{path}: invalid JSON: {err.msg}") from None
    except UnicodeDecodeError:
        raise SsftError(f"{path}: not a UTF-8 text file") from None


def read_weights(folder: Path) -> dict[str, torch.Tensor]:
    """Every tensor of a folder's safetensors weights (one file or an index of shards); {} when it has none."""
    folder = Path(folder)
    files = []
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        files = sorted({folder / f for f in _read_json(index).get("weight_map", {}).values()})
    elif (folder / "model.safetensors").is_file():
        files = [folder / "model.safetensors"]
    weights: dict[str, torch.Tensor] = {}
    for file in files:
        try:
            weights.update(load_file(file))
        except (SafetensorError, OSError) as err:
            raise SsftError(f"{file}: unreadable safetensors file ({str(err).splitlines()[0]})") from None
    return weights


def _module_class(entry: dict[str, Any]) -> str:
    return str(entry.get("type", "")).rsplit(".", 1)[-1]


def _pooling_mode(config: dict[str, Any]) -> str:
    if isinstance(config.get("pooling_mode"), str):
        return config["pooling_mode"]
    for mode in ("cls_token", "mean_tokens", "max_tokens", "mean_sqrt_len_tokens", "weightedmean_tokens", "lasttoken"):
        if config.get(f"pooling_mode_{mode}"):
            return {"cls_token": "cls", "mean_tokens": "mean", "max_tokens": "max"}.get(mode, mode)
    return "mean"


ROUTER_CLASSES = ("Router", "Asym")  # Asym: sentence-transformers' older name of the Router
ROLES = ("query", "document")


def _read_module(modules: SentenceModules, kind: str, folder: Path, path: str, st_config: dict[str, Any]) -> None:
    """One module (class name ``kind``, in ``folder / path``) into ``modules``."""
    sub = folder / path
    if kind in ("Transformer", "MultiVectorTransformer"):
        modules.transformer_path = path
        for name in ("sentence_bert_config.json", "sentence_xlnet_config.json"):
            if (sub / name).is_file():
                modules.transformer_config = _read_json(sub / name)
    elif kind == "Pooling":
        config = _read_json(sub / "config.json") if (sub / "config.json").is_file() else {}
        modules.pooling = _pooling_mode(config)
        modules.include_prompt = bool(config.get("include_prompt", True))
    elif kind == "Dense":
        config = _read_json(sub / "config.json")
        weights = read_weights(sub)
        if not weights:
            raise SsftError(f"{sub}: a Dense module without safetensors weights (pickle weights are not loaded)")
        modules.dense.append(DenseModule(
            weight=weights["linear.weight"], bias=weights.get("linear.bias"),
            activation=str(config.get("activation_function", "torch.nn.modules.linear.Identity")),
            token_level=config.get("module_input_name") == "token_embeddings" or st_config.get("model_type") in
            ("MultiVectorEncoder", "ColBERT")))
    elif kind == "Normalize":
        modules.normalize = True
    elif kind == "MultiVectorMask":
        config = _read_json(sub / "config.json") if (sub / "config.json").is_file() else {}
        modules.skiplist_words = list(config.get("skiplist_words") or [])
    else:
        modules.other.append(kind)


def _route_mappings(parameters: dict[str, Any], where: Path) -> dict[tuple, str]:
    """A Router's ``route_mappings``: JSON keys such as "('query', None)" back to (task, modality) tuples."""
    mappings = {}
    for key, route in (parameters.get("route_mappings") or {}).items():
        try:
            task_modality = ast.literal_eval(key)
        except (ValueError, SyntaxError):
            raise SsftError(f"{where}: route_mappings key {key!r} is not a (task, modality) pair") from None
        if not (isinstance(task_modality, tuple) and len(task_modality) == 2):
            raise SsftError(f"{where}: route_mappings key {key!r} is not a (task, modality) pair")
        mappings[task_modality] = route
    return mappings


def router_routes(folder: Path) -> dict[str, list[tuple[str, str]]]:
    """{query, document} -> that route's modules [(module folder, class name)] of the Router in ``folder`` (the
    modules listed after the Router in ``modules.json`` appended to both), the way sentence-transformers resolves
    ``encode_query`` / ``encode_document``: a route mapping of the task (with the text modality, or any), else the
    route named as the task. A route missing, or a module its structure names that the folder lacks, is an error."""
    folder = Path(folder)
    entries = _read_json(folder / "modules.json")
    where = folder / "router_config.json"
    index = [i for i, e in enumerate(entries) if isinstance(e, dict) and _module_class(e) in ROUTER_CLASSES]
    if not where.is_file():
        raise SsftError(f"{folder}/modules.json: lists a Router but {where.name} is missing")
    config = _read_json(where)
    types, structure = config.get("types"), config.get("structure")
    if not isinstance(types, dict) or not isinstance(structure, dict) or not structure:
        raise SsftError(f"{where}: expected 'types' and 'structure' mappings (sentence-transformers' Router format)")
    mappings = _route_mappings(config.get("parameters") or {}, where)
    after = [(str(e.get("path", "")), _module_class(e)) for e in entries[index[0] + 1:]] if index else []
    routes = {}
    for role in ROLES:
        name = next((mappings[k] for k in ((role, "text"), (role, None)) if k in mappings), role)
        if name not in structure:
            close = difflib.get_close_matches(name, list(structure), n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise SsftError(f"{where}: no '{name}' route for the {role} tower (routes: {', '.join(map(str, structure))}); ssft "
                            f"reads a Router's query and document routes as its two towers{hint}")
        modules = []
        for module_id in structure[name] or []:
            if module_id not in types:
                raise SsftError(f"{where}: route '{name}' names module '{module_id}', which 'types' does not list")
            if not (folder / module_id).is_dir():
                raise SsftError(f"{where}: route '{name}' names module '{module_id}', which is not in {folder}")
            modules.append((str(module_id), str(types[module_id]).rsplit(".", 1)[-1]))
        if not any(kind in ("Transformer", "MultiVectorTransformer") for _, kind in modules):
            raise SsftError(f"{where}: route '{name}' has no Transformer module")
        routes[role] = modules + after
    return routes


def is_router(folder: Path) -> bool:
    """``folder`` is a sentence-transformers folder whose modules start with a Router."""
    file = Path(folder) / "modules.json"
    if not file.is_file():
        return False
    entries = _read_json(file)
    return isinstance(entries, list) and any(isinstance(e, dict) and _module_class(e) in ROUTER_CLASSES for e in entries)


def router_towers(folder: Path) -> dict[str, str]:
    """{query, document} -> the Transformer folder of that route, when ``folder`` is a sentence-transformers Router
    whose two routes hold different transformers (two towers); {} otherwise."""
    if not is_router(folder):
        return {}
    routes = router_routes(folder)
    found = {role: next(p for p, k in mods if k in ("Transformer", "MultiVectorTransformer")) for role, mods in routes.items()}
    return found if found["query"] != found["document"] else {}


def read_sentence_modules(folder: Path, st_config: dict[str, Any], route: str = "query") -> SentenceModules:
    """The modules a ``modules.json`` lists, read from their folders (no sentence-transformers import); through a
    Router, those of its ``route`` (``query`` or ``document``: ``router_routes``)."""
    entries = _read_json(folder / "modules.json")
    if not isinstance(entries, list):
        raise SsftError(f"{folder / 'modules.json'}: expected a list of modules")
    modules = SentenceModules(prompts={k: v for k, v in (st_config.get("prompts") or {}).items() if isinstance(v, str)})
    if is_router(folder):
        listed = router_routes(folder)[route]
        modules.route = route
        modules.towers = router_towers(folder)
    else:
        listed = [(str(e.get("path", "")), _module_class(e)) for e in entries]
    for path, kind in listed:
        _read_module(modules, kind, folder, path, st_config)
    return modules


def _marker(prompt: str | None, default: str) -> str:
    text = (prompt or "").strip()
    return text or default


def read_checkpoint(name: str, folder: Path, route: str = "query") -> Pretrained:
    """The kind of ``folder`` (the local copy of ``name``) and its settings; weights are read by ``load_pretrained``.
    A sentence-transformers Router is read through its ``route`` (``query``, the default, or ``document``)."""
    folder = Path(folder)
    if route not in ROLES:
        raise ValueError(f"route must be one of {ROLES}, got {route!r}")
    config_folder = folder
    if is_router(folder):  # the config of the route's transformer (a Router folder has none at its root)
        config_folder = folder / next(p for p, k in router_routes(folder)[route] if k in ("Transformer",
                                                                                          "MultiVectorTransformer"))
    config = _read_json(config_folder / "config.json") if (config_folder / "config.json").is_file() else {}
    architectures = [str(a) for a in config.get("architectures") or []]
    st_file = folder / "config_sentence_transformers.json"
    st_config = _read_json(st_file) if st_file.is_file() else {}
    model_type = st_config.get("model_type")
    if "HF_ColBERT" in architectures:
        meta_file = folder / "artifact.metadata"
        meta = _read_json(meta_file) if meta_file.is_file() else {}
        colbert = ColbertSettings(
            projection=None, query_marker=meta.get("query_token_id") or "[unused0]",
            document_marker=meta.get("doc_token_id") or "[unused1]", query_length=int(meta.get("query_maxlen") or 32),
            attend_expansion=bool(meta.get("attend_to_mask_tokens", False)),
            mask_punctuation=bool(meta.get("mask_punctuation", True)))
        return Pretrained(name, folder, "colbert-stanford", config, colbert=colbert)
    if model_type in ("MultiVectorEncoder", "ColBERT") and (folder / "modules.json").is_file():
        modules = read_sentence_modules(folder, st_config, route)
        prompts = dict(modules.prompts)
        for key, role in (("query_prefix", "query"), ("document_prefix", "document")):  # PyLate <= 3
            if st_config.get(key):
                prompts[role] = st_config[key]
        expansion = modules.transformer_config.get("query_expansion")
        if "query_expansion" not in modules.transformer_config and model_type == "ColBERT":
            expansion = None if st_config.get("do_query_expansion") is False else {
                "length": st_config.get("query_length") or 32, "attend": bool(st_config.get("attend_to_expansion_tokens"))}
        skiplist = modules.skiplist_words
        if skiplist is None and model_type == "ColBERT":
            skiplist = st_config.get("skiplist_words", PUNCTUATION)
        token_dense = [d for d in modules.dense if d.token_level]
        colbert = ColbertSettings(
            projection=token_dense[0].weight if len(token_dense) == 1 and token_dense[0].bias is None
            and token_dense[0].linear else None,
            query_marker=_marker(prompts.get("query"), "[unused0]"),
            document_marker=_marker(prompts.get("document"), "[unused1]"),
            query_length=int(expansion["length"]) if expansion else None,
            attend_expansion=bool(expansion.get("attend", False)) if expansion else True,
            mask_punctuation=bool(skiplist))
        pretrained = Pretrained(name, folder, "multi-vector", config, modules=modules, colbert=colbert)
        if len(token_dense) != 1 or colbert.projection is None:
            pretrained.notes.append(f"its projection ({len(token_dense)} Dense module(s)) is not one linear map without "
                                    f"bias, which is what ssft's ColBERT has: not used")
        if skiplist and sorted(skiplist) != sorted(PUNCTUATION):
            pretrained.notes.append("its skiplist is not string.punctuation; ssft's ColBERT skips punctuation")
        return pretrained
    if any(a.endswith("ForSequenceClassification") for a in architectures) or model_type == "CrossEncoder":
        return Pretrained(name, folder, "sequence-classification", config)
    if (folder / "modules.json").is_file():
        modules = read_sentence_modules(folder, st_config, route)
        return Pretrained(name, folder, "sentence-transformers", config, modules=modules)
    return Pretrained(name, folder, "transformers", config)


def account_weights(pretrained: Pretrained, checkpoint: dict[str, torch.Tensor], model_state: dict[str, Any]) -> None:
    """Fill ``pretrained.extra`` (checkpoint weights the transformer has no place for) and ``missing`` (transformer
    weights the checkpoint lacks), matching names with and without the task model's encoder prefix."""
    prefix = _encoder_prefix(pretrained.config)
    wanted = set(model_state)
    found = set()
    for key, tensor in checkpoint.items():
        bare = key[len(prefix) + 1:] if prefix and key.startswith(prefix + ".") else key
        if bare in wanted:
            found.add(bare)
        else:
            pretrained.extra[key] = tensor
    buffers_ok = ("embeddings.position_ids", "embeddings.token_type_ids")
    pretrained.missing = sorted(k for k in wanted - found if not k.endswith(buffers_ok)) if checkpoint else []


def classifier_head(pretrained: Pretrained) -> dict[str, torch.Tensor] | None:
    """A sequence-classification checkpoint's (pooler dense, classifier) as {pooler.weight, pooler.bias,
    linear.weight, linear.bias}, taken from ``extra``; None when its layout is not BERT's pooler + linear (the
    layouts ``ssft.models.cross``'s classifier head holds: bert, roberta / xlm-roberta, mpnet heads are dense +
    tanh + linear on the first token)."""
    prefix = _encoder_prefix(pretrained.config)
    layouts = [(f"{prefix}.pooler.dense", "classifier"), ("pooler.dense", "classifier"),
               ("classifier.dense", "classifier.out_proj")]
    for pooler, linear in layouts:
        keys = [f"{pooler}.weight", f"{pooler}.bias", f"{linear}.weight", f"{linear}.bias"]
        if all(pretrained.has(k) for k in keys):
            if pretrained.extra[keys[2]].shape[0] != 1:
                raise SsftError(f"{pretrained.name}: its classifier has {pretrained.extra[keys[2]].shape[0]} labels; a "
                                f"ranking cross-encoder has one (num_labels 1)")
            w, b, lw, lb = (pretrained.take(k) for k in keys)
            return {"pooler.weight": w, "pooler.bias": b, "linear.weight": lw, "linear.bias": lb}
    return None


__all__ = ["KINDS", "PUNCTUATION", "ROLES", "ColbertSettings", "DenseModule", "Pretrained", "SentenceModules",
           "account_weights", "classifier_head", "is_router", "read_checkpoint", "read_sentence_modules", "read_weights",
           "router_routes", "router_towers"]

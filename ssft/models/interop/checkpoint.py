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
from ssft.core.hub import WeightsHeader, module_folder, weights_header

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
    query_marker: str | None  # None: that tower's texts are not marked
    document_marker: str | None
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
    """Every tensor of a folder's safetensors weights (one file or an index of shards); {} when it has none. Half-precision
    tensors (a checkpoint saved in float16 / bfloat16) are read as float32, the precision ssft's modules hold."""
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
    return {k: v.float() if v.dtype in (torch.float16, torch.bfloat16) else v for k, v in weights.items()}


def _module_class(entry: dict[str, Any]) -> str:
    return str(entry.get("type", "")).rsplit(".", 1)[-1]


def module_entries(folder: Path) -> list[tuple[str, str]]:
    """[(module path, class name)] of ``folder/modules.json``, every path checked to stay inside ``folder``
    (``ssft.core.hub.module_folder``: no absolute path, no '..')."""
    where = Path(folder) / "modules.json"
    entries = _read_json(where)
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise SsftError(f"{where}: expected a list of modules")
    for entry in entries:
        module_folder(folder, entry.get("path", ""), where)
    return [(str(e.get("path", "")), _module_class(e)) for e in entries]


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
    sub = module_folder(folder, path, folder / "modules.json")
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
    entries = module_entries(folder)
    where = folder / "router_config.json"
    index = [i for i, (_, kind) in enumerate(entries) if kind in ROUTER_CLASSES]
    if not where.is_file():
        raise SsftError(f"{folder}/modules.json: lists a Router but {where.name} is missing")
    config = _read_json(where)
    types, structure = config.get("types"), config.get("structure")
    if not isinstance(types, dict) or not isinstance(structure, dict) or not structure:
        raise SsftError(f"{where}: expected 'types' and 'structure' mappings (sentence-transformers' Router format)")
    mappings = _route_mappings(config.get("parameters") or {}, where)
    after = entries[index[0] + 1:] if index else []
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
            if not module_folder(folder, module_id, where).is_dir():
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
    entries = module_entries(folder)
    modules = SentenceModules(prompts={k: v for k, v in (st_config.get("prompts") or {}).items() if isinstance(v, str)})
    if is_router(folder):
        listed = router_routes(folder)[route]
        modules.route = route
        modules.towers = router_towers(folder)
    else:
        listed = entries
    for path, kind in listed:
        _read_module(modules, kind, folder, path, st_config)
    return modules


def _marker(prompt: str | None) -> str | None:
    """A multi-vector checkpoint's marker: its prompt without the space (None: no prompt, no marker)."""
    return (prompt or "").strip() or None


def _kind(folder: Path, config: dict[str, Any], st_config: dict[str, Any]) -> str:
    """Which of ``KINDS`` a checkpoint is, from its config.json and config_sentence_transformers.json."""
    architectures = [str(a) for a in config.get("architectures") or []]
    model_type = st_config.get("model_type")
    if "HF_ColBERT" in architectures:
        return "colbert-stanford"
    if model_type in ("MultiVectorEncoder", "ColBERT") and (folder / "modules.json").is_file():
        return "multi-vector"
    if any(a.endswith("ForSequenceClassification") for a in architectures) or model_type == "CrossEncoder":
        return "sequence-classification"
    return "sentence-transformers" if (folder / "modules.json").is_file() else "transformers"


def checkpoint_kind(folder: Path) -> tuple[str, dict[str, Any]]:
    """(kind, config.json) of a checkpoint folder, from its JSON files alone (``read_checkpoint`` without the modules'
    weights); a Router's config is its query route's."""
    folder = Path(folder)
    config_folder = folder
    if is_router(folder):
        config_folder = module_folder(folder, next(p for p, k in router_routes(folder)["query"] if k in (
            "Transformer", "MultiVectorTransformer")), folder / "router_config.json")
    config = _read_json(config_folder / "config.json") if (config_folder / "config.json").is_file() else {}
    st_file = folder / "config_sentence_transformers.json"
    st_config = _read_json(st_file) if st_file.is_file() else {}
    config = config if isinstance(config, dict) else {}
    return _kind(folder, config, st_config if isinstance(st_config, dict) else {}), config


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
    st_file = folder / "config_sentence_transformers.json"
    st_config = _read_json(st_file) if st_file.is_file() else {}
    model_type = st_config.get("model_type")
    kind = _kind(folder, config, st_config)
    if kind == "colbert-stanford":
        meta_file = folder / "artifact.metadata"
        meta = _read_json(meta_file) if meta_file.is_file() else {}
        colbert = ColbertSettings(
            projection=None, query_marker=meta.get("query_token_id") or "[unused0]",
            document_marker=meta.get("doc_token_id") or "[unused1]", query_length=int(meta.get("query_maxlen") or 32),
            attend_expansion=bool(meta.get("attend_to_mask_tokens", False)),
            mask_punctuation=bool(meta.get("mask_punctuation", True)))
        return Pretrained(name, folder, "colbert-stanford", config, colbert=colbert)
    if kind == "multi-vector":
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
            query_marker=_marker(prompts.get("query")),
            document_marker=_marker(prompts.get("document")),
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
    if kind == "sequence-classification":
        return Pretrained(name, folder, "sequence-classification", config)
    if kind == "sentence-transformers":
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


def two_labels_message(name: str, labels: int) -> str:
    """Why a sequence-classification checkpoint of ``labels`` labels gives no ``head: classifier`` cross-encoder."""
    return (f"{name}: its classifier has {labels} labels; a ranking cross-encoder has one (num_labels 1): set "
            f"model.head: cls_linear to train a new head on its encoder")


def _classifier_layouts(config: dict[str, Any]) -> list[tuple[str, str]]:
    """(pooler dense, classifier linear) name prefixes of the sequence-classification heads ``classifier_head`` takes."""
    prefix = _encoder_prefix(config)
    return [(f"{prefix}.pooler.dense", "classifier"), ("pooler.dense", "classifier"),
            ("classifier.dense", "classifier.out_proj")]


def classifier_labels(config: dict[str, Any], header: WeightsHeader) -> int | None:
    """How many labels the classifier ``classifier_head`` would take from a checkpoint has, read from its config and
    safetensors header (the rows of its linear layer); None when it has none of those layouts."""
    for pooler, linear in _classifier_layouts(config):
        keys = [f"{pooler}.weight", f"{pooler}.bias", f"{linear}.weight", f"{linear}.bias"]
        if all(k in header.shapes for k in keys) and header.shapes[keys[2]]:
            return header.shapes[keys[2]][0]
    return None


def transformer_folders(folder: Path) -> list[Path]:
    """The folders holding a checkpoint's transformers: the Transformer module of a sentence-transformers folder (each
    route's, for a Router), else ``folder`` itself. Module paths are checked to stay inside ``folder``."""
    folder = Path(folder)
    if is_router(folder):
        routes = router_routes(folder)
        found = {p for mods in routes.values() for p, k in mods if k in ("Transformer", "MultiVectorTransformer")}
        return [module_folder(folder, p, folder / "modules.json") for p in sorted(found)]
    if (folder / "modules.json").is_file():
        paths = [p for p, k in module_entries(folder) if k in ("Transformer", "MultiVectorTransformer")]
        return [module_folder(folder, paths[0], folder / "modules.json")] if paths else [folder]
    return [folder]


def _shape(shape: list[int] | tuple[int, ...]) -> str:
    return "[" + ", ".join(map(str, shape)) + "]"


def check_weight_shapes(folder: Path, trust_remote_code: bool = False, header: WeightsHeader | None = None) -> None:
    """SsftError naming the first tensor whose shape in ``folder``'s safetensors header differs from the one its
    config.json gives the model: the config does not describe these weights (another model's config, or a size edited
    by hand). The model is built on the meta device (no memory, no weight read) after ``check_layer_count`` has bounded
    its depth; a config transformers cannot build is left to the loader, which reports it."""
    from transformers import AutoConfig, AutoModel  # noqa: PLC0415 -- the models layer's own heavy dependency
    from transformers.utils import logging as hf_logging  # noqa: PLC0415

    folder = Path(folder)
    header = header if header is not None else weights_header(folder)
    if header is None or not header.shapes:
        return
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # what transformers says of the config, it says again when the model loads
    try:
        config = AutoConfig.from_pretrained(folder, trust_remote_code=trust_remote_code)
        with torch.device("meta"):
            model = AutoModel.from_config(config, trust_remote_code=trust_remote_code)
    except Exception:  # noqa: BLE001 -- whatever a config transformers cannot build raises: loading it says why
        return
    finally:
        hf_logging.set_verbosity(verbosity)
    prefixes = [p for p in (getattr(model, "base_model_prefix", ""), _encoder_prefix(config.to_dict())) if p]
    in_file = {next((k[len(p) + 1:] for p in prefixes if k.startswith(p + ".")), k): k for k in header.shapes}
    mismatched = [(name, list(tensor.shape)) for name, tensor in model.state_dict().items()
                  if name in in_file and list(tensor.shape) != header.shapes[in_file[name]]]
    if mismatched:
        # the first weight matrix in the model's order (the word embeddings before a LayerNorm's bias)
        bare, expected = max(mismatched, key=lambda item: len(item[1]))
        key, shape = in_file[bare], header.shapes[in_file[bare]]
        named = [f"{k} {v}" for k, v in config.to_dict().items() if isinstance(v, int) and not isinstance(v, bool)
                 and v in set(expected) - set(shape)]
        why = f" ({', '.join(named[:3])})" if named else ""
        raise SsftError(f"{folder / 'config.json'} does not describe the weights beside it: {key} is {_shape(shape)} in "
                        f"{header.label}, config.json makes it {_shape(expected)}{why}; use the config.json these "
                        f"weights were saved with")


# a cls_linear head (a linear map of the raw [CLS] state) exported as a sequence-classification head: pooler ε·I,
# classifier w/ε, since that head's pooler ends in tanh (ssft.models.interop.export)
CLS_LINEAR_EPSILON = 1e-5


def classifier_head(pretrained: Pretrained, take: bool = True) -> dict[str, torch.Tensor] | None:
    """A sequence-classification checkpoint's (pooler dense, classifier) as {pooler.weight, pooler.bias,
    linear.weight, linear.bias}, taken from ``extra`` (``take=False``: only read, left for the load report); None
    when its layout is not BERT's pooler + linear (the layouts ``ssft.models.cross``'s classifier head holds: bert,
    roberta / xlm-roberta, mpnet heads are dense + tanh + linear on the first token)."""
    for pooler, linear in _classifier_layouts(pretrained.config):
        keys = [f"{pooler}.weight", f"{pooler}.bias", f"{linear}.weight", f"{linear}.bias"]
        if all(pretrained.has(k) for k in keys):
            if pretrained.extra[keys[2]].shape[0] != 1:
                raise SsftError(two_labels_message(pretrained.name, pretrained.extra[keys[2]].shape[0]))
            w, b, lw, lb = (pretrained.take(k) if take else pretrained.extra[k] for k in keys)
            return {"pooler.weight": w, "pooler.bias": b, "linear.weight": lw, "linear.bias": lb}
    return None


def cls_linear_pooler(hidden: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The pooler weight ε·I a ``cls_linear`` head is exported through (its bias is zero); what
    ``exported_cls_linear`` recognises."""
    return torch.eye(hidden, dtype=dtype) * CLS_LINEAR_EPSILON


def exported_cls_linear(head: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The (weight, bias) of the linear map on the raw [CLS] state that a ``classifier_head`` holds when it is an ssft
    ``cls_linear`` export (pooler ε·I with zero bias, classifier w/ε: ``ssft.models.interop.export``), folded back
    (w = ε · classifier); None for any other head."""
    weight, bias = head["pooler.weight"], head["pooler.bias"]
    if weight.ndim != 2 or weight.shape[0] != weight.shape[1] or bool(bias.any()):
        return None
    if not torch.equal(weight, cls_linear_pooler(weight.shape[0], weight.dtype)):
        return None
    return head["linear.weight"] * CLS_LINEAR_EPSILON, head["linear.bias"]


__all__ = ["CLS_LINEAR_EPSILON", "KINDS", "PUNCTUATION", "ROLES", "ColbertSettings", "DenseModule", "Pretrained",
           "SentenceModules", "account_weights", "check_weight_shapes", "checkpoint_kind", "classifier_head",
           "classifier_labels", "cls_linear_pooler", "exported_cls_linear", "is_router", "module_entries", "read_checkpoint",
           "read_sentence_modules", "read_weights", "router_routes", "router_towers", "transformer_folders",
           "two_labels_message"]

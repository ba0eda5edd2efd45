"""``ssft-train --check RECIPE``: a dry validation. The recipe is parsed and validated (as ``ssft-train`` does), the
models and datasets it names are looked up *offline and without side effects* (no download, no unpacking, no weights
loaded: JSON files and safetensors headers at most), and the plan is printed — architecture, method, loss, data,
steps / epochs, evaluations. Nothing is trained and nothing is written.

A model folder that is here is checked as loading it would be, from its JSON files and its safetensors header alone (no
weight read): module paths that stay inside it, a config.json that describes its weights (layer count, every tensor's
shape), tokenizer files that cover its vocabulary, and for a ``head: classifier`` cross-encoder a sequence-classification
classifier of one label; a float16 / bfloat16 checkpoint is noted (loaded in float32). Any of these is fatal.

A model or dataset that is not here is reported when it can come from elsewhere: a hub id (downloaded when online), a
BEIR dataset name (downloaded when online), or a licensed / remote collection ssft cannot fetch (Robust04, ClueWeb09b,
MS MARCO: the recipe's comment says where it comes from); the plan is printed and ``check_recipe`` says the recipe is
not ready (``ssft-train --check`` then exits non-zero). A local path that does not exist is fatal, except a run folder
another recipe produces first (a teacher): that is reported as "to be trained first".
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from ssft.config.recipe import Recipe
from ssft.config.registry import ADAPTERS, LOSSES, MODELS
from ssft.core.errors import SsftError
from ssft.core.hub import ALIASES, PIP_SHIPPED, PIP_SPLIT_ZIP, is_router_folder, max_input_length, weights_header
from ssft.core.paths import SPEC_FILE, cache_home, data_home
from ssft.data.hub_layouts import hub_id, is_hub_copy
from ssft.data.irds import strip_prefix
from ssft.models.base import check_model_folder
from ssft.models.interop.checkpoint import checkpoint_kind, classifier_labels, transformer_folders, two_labels_message

# collections ssft cannot download: where they come from (a recipe at the papers' settings names them)
REMOTE_DATASETS = {
    "robust04": "licensed: TREC disks 4 & 5 (NIST, https://trec.nist.gov/data-disks.html) + Robust04 topics/qrels; "
                "build a BEIR folder (corpus.jsonl, queries.jsonl, qrels/) from them, e.g. with ir_datasets "
                "'disks45/nocr/trec-robust-2004'",
    "clueweb09b": "licensed: ClueWeb09 Category B (Lemur project, https://lemurproject.org/clueweb09/) + TREC Web Track "
                  "2009 topics/qrels; build a BEIR folder from them",
    "msmarco": "MS MARCO passage (https://microsoft.github.io/msmarco/; BEIR's 'msmarco' zip when online, ~1 GB)",
    "msmarco-passage": "MS MARCO passage (https://microsoft.github.io/msmarco/); BEIR's 'msmarco' folder",
    "msmarco-document": "MS MARCO document ranking (https://microsoft.github.io/msmarco/TREC-Deep-Learning-2019); "
                        "build a BEIR folder from it",
}
BEIR_NAMES = {"scifact", "nfcorpus", "fiqa", "arguana", "scidocs", "trec-covid", "nq", "hotpotqa", "quora", "dbpedia-entity",
              "fever", "climate-fever", "webis-touche2020", "cqadupstack", "msmarco", "signal1m", "trec-news", "robust04",
              "bioasq"}


@dataclass
class Found:
    what: str  # e.g. "model.name"
    name: str
    where: str | None  # where it was found, or None
    note: str = ""  # why it is not here, when it is not
    fatal: bool = False
    folder: Path | None = None  # the local folder a model loads from, when it is here and not a saved ssft model
    remarks: list[str] = field(default_factory=list)  # what its files tell that the plan mentions

    def line(self) -> str:
        if self.where is not None:
            return f"  {self.what}: {self.name} — {self.where}" + "".join(f"; {r}" for r in self.remarks)
        return f"  {self.what}: {self.name} — NOT HERE: {self.note}"


def model_status(what: str, name: str) -> Found:
    """Where ``name`` would load from, offline, touching nothing (``ssft.core.hub.resolve_model``'s order)."""
    local = Path(name).expanduser()
    if local.exists():
        if (local / SPEC_FILE).is_file() or (local / "model" / SPEC_FILE).is_file():
            return Found(what, name, "a saved ssft model (local)")
        if (local / "config.json").is_file():
            return Found(what, name, "a transformers folder (local)", folder=local)
        if is_router_folder(local):
            return Found(what, name, "a sentence-transformers Router folder with query / document routes (local)",
                         folder=local)
        return Found(what, name, None, f"{local} exists but holds no config.json, {SPEC_FILE} nor a sentence-transformers "
                                       f"Router (modules.json + router_config.json)", fatal=True)
    hub_id = ALIASES.get(name, name)
    try:
        from huggingface_hub import snapshot_download  # noqa: PLC0415 -- only what --check asks

        cached = Path(snapshot_download(hub_id, local_files_only=True))
        if (cached / "config.json").is_file():
            return Found(what, name, "the Hugging Face cache", folder=cached)
    except Exception:  # not cached, or not a repo id
        pass
    if hub_id in PIP_SHIPPED:
        module, sub, pip_name = PIP_SHIPPED[hub_id]
        spec = importlib.util.find_spec(module)
        if spec and spec.submodule_search_locations and (Path(list(spec.submodule_search_locations)[0]) / sub).is_dir():
            return Found(what, name, f"pip package {pip_name}", folder=Path(list(spec.submodule_search_locations)[0]) / sub)
    if hub_id in PIP_SPLIT_ZIP:
        distributions = PIP_SPLIT_ZIP[hub_id][0]
        unpacked = cache_home() / "models" / hub_id.replace("/", "--")
        if (unpacked / "config.json").is_file():
            return Found(what, name, "unpacked from its pip parts (ssft cache)", folder=unpacked)
        try:
            for dist in distributions:
                importlib.metadata.distribution(dist)
            return Found(what, name, f"pip packages {distributions[0]} … {distributions[-1]} (unpacked on first use)")
        except importlib.metadata.PackageNotFoundError:
            pass
    if "/" in name and (name.startswith((".", "/", "~")) or name.startswith("runs/")):
        return Found(what, name, None, "a local folder that does not exist yet (a run folder trained by another recipe "
                                       "first?)")
    return Found(what, name, None, "not in the Hugging Face cache nor a pip package: a hub id, downloaded when online")


def dataset_status(name: str) -> Found:
    """The BEIR folder ``data.dataset`` names, looked up locally (``ssft.data.beir.resolve_dataset`` without its
    download)."""
    candidates = [Path(name).expanduser()]
    if data_home() is not None:
        candidates.append(data_home() / name)
    candidates.append(cache_home() / "datasets" / name)
    for folder in candidates:
        if (folder / "corpus.jsonl").exists() or (folder / "corpus.jsonl.gz").exists():
            return Found("data.dataset", name, str(folder))
        if folder.is_dir() and is_hub_copy(folder):
            return Found("data.dataset", name, f"{folder} (a local copy of a hub dataset)")
    irds_id = strip_prefix(name)
    local_form = name.startswith((".", "/", "~")) or "\\" in name  # the loader's rule: a path is never an id
    if irds_id is not None or (name.count("/") >= 2 and not local_form):  # not ir_datasets' registry: importing
        # it writes ~/.ir_datasets
        return Found("data.dataset", name, None, "an ir_datasets id: read from ir_datasets' cache, downloaded when online")
    if hub_id(name) is not None:
        return Found("data.dataset", name, None, "a hub dataset id: read from the datasets cache, downloaded when online")
    key = name.lower().rstrip("/").split("/")[-1]
    if key in REMOTE_DATASETS:
        return Found("data.dataset", name, None, REMOTE_DATASETS[key])
    if key in BEIR_NAMES and "/" not in name:
        return Found("data.dataset", name, None, "a BEIR dataset, downloaded into the ssft cache when online")
    home = "" if data_home() is not None else " (SSFT_DATA_HOME is not set)"
    return Found("data.dataset", name, None, f"no BEIR folder at {' or '.join(map(str, candidates))}{home}", fatal=True)


def inspect_model(found: Found, cross_classifier: bool = False) -> None:
    """What the files of a model that is here tell, without loading a weight (``ssft.models.base.check_model_folder``
    on each of its transformer folders): an SsftError for what loading it would refuse, remarks for the plan. With
    ``cross_classifier`` (model.name of a ``head: classifier`` cross-encoder) a sequence-classification checkpoint's
    classifier must have one label. Code a folder ships (trust_remote_code) is never run here."""
    if found.folder is None:
        return
    kind, config = checkpoint_kind(found.folder)  # module paths leaving the folder are refused here
    for folder in transformer_folders(found.folder):
        check_model_folder(folder, found.name)
        header = weights_header(folder)
        if header is None:
            continue
        half = header.half_precision()
        if half is not None:
            found.remarks.append(f"weights stored in {half}, loaded in float32")
        if cross_classifier and kind == "sequence-classification":
            labels = classifier_labels(config, header)
            if labels is not None and labels != 1:
                raise SsftError(two_labels_message(found.name, labels))


def _config_limit(found: Found) -> int | None:
    """``max_position_embeddings`` from a local config.json (the rule of ``ssft.core.hub.max_input_length``)."""
    if found.where is None or not ("transformers folder" in found.where or "Router folder" in found.where):
        return None
    return max_input_length(found.name)  # a local folder: resolve_model returns it as it is


def model_lookups(recipe: Recipe) -> list[Found]:
    """Where every model the recipe names would load from (``model_status``), touching nothing."""
    m = recipe.model
    found = [model_status("model.name", m.name)]
    document_name = getattr(m.config, "document_name", None)  # dense's document tower
    if document_name:
        found.append(model_status("model.document_name", document_name))
    loss_config = recipe.loss.config
    if LOSSES.get(recipe.loss.name).needs_teacher and getattr(loss_config, "teacher", None):
        found.append(model_status("loss.teacher", loss_config.teacher))
    if recipe.distillation is not None:
        found.append(model_status("distillation.teacher", recipe.distillation.teacher))
        if recipe.distillation.generated_queries is not None:
            found.append(model_status("distillation.generated_queries.model", recipe.distillation.generated_queries.model))
    return found


def check_model_files(recipe: Recipe, found: list[Found] | None = None) -> None:
    """The files of every model the recipe names that is here, checked as loading would (``inspect_model``): what
    ssft-train runs before any data work, and ``--check`` in its plan. One line naming the recipe key."""
    m = recipe.model
    for item in model_lookups(recipe) if found is None else found:
        try:
            inspect_model(item, item.what == "model.name" and getattr(m.config, "head", None) == "classifier")
        except SsftError as err:
            raise SsftError(f"{recipe.source}: {item.what}: {err}") from None


def plan(recipe: Recipe) -> tuple[list[str], list[Found]]:
    """The plan's lines and every model / dataset lookup (for the caller to decide what is fatal)."""
    model_cls = MODELS.get(recipe.model.architecture)
    found = model_lookups(recipe)
    found.append(dataset_status(recipe.data.dataset))
    check_model_files(recipe, found)
    _check_lengths(recipe, found)
    lines = [f"recipe {recipe.source} (seed {recipe.seed})", *_model_lines(recipe, model_cls), *_component_lines(recipe),
             _data_line(recipe), _training_line(recipe)]
    if recipe.callbacks:
        lines.append("callbacks: " + ", ".join(json.dumps(c) if isinstance(c, dict) else c for c in recipe.callbacks))
    lines.append(_evaluation_line(recipe, model_cls))
    lines += evaluation_plan(recipe, model_cls.full_retrieval, model_cls.bi_encoder,
                             model_cls.ranks_untrained_for(recipe.model.config))
    return lines, found


def _check_lengths(recipe: Recipe, found: list[Found]) -> None:
    """model.max_length / query_max_length against the position embeddings of the model folders found here."""
    m = recipe.model
    document_name = getattr(m.config, "document_name", None)
    for item in found:
        limit = _config_limit(item)
        if limit is not None and item.what in ("model.name", "model.document_name"):
            for key in ("max_length", "query_max_length"):
                if getattr(m, key) > limit and not (key == "max_length" and item.what == "model.name" and document_name):
                    raise SsftError(f"{recipe.source}: model.{key}: {getattr(m, key)} is beyond what {item.what} "
                                    f"'{item.name}' can encode ({limit} tokens)")


def _model_lines(recipe: Recipe, model_cls) -> list[str]:
    """The architecture, its backbone(s) and lengths, and its own keys."""
    m, c = recipe.model, recipe.model.config  # c: the architecture's typed config
    document_name = getattr(c, "document_name", None)
    towers = f"query tower {m.name}, document tower {document_name}" if document_name else m.name
    lines = [f"architecture: {m.architecture} ({model_cls.__name__}); {towers}; max_length {m.max_length}, "
             f"query_max_length {m.query_max_length}"]
    if m.architecture == "dense":
        normalize = "null (as the checkpoint)" if c.normalize is None else c.normalize
        lines.append(f"  dense: pooling {c.pooling}, projection_dim {c.projection_dim}, normalize {normalize}, "
                     f"score_scale {c.score_scale:g}" + (f", query_layers {c.query_layers}" if c.query_layers else ""))
    elif m.architecture == "twin":
        lines.append(f"  twin: pooling {c.pooling}, scorer {c.scorer}")
    elif m.architecture == "colbert":
        lines.append(f"  colbert: colbert_dim {c.colbert_dim}")
    elif m.architecture == "cross":
        detail = {"dual_pooled": f" (dual pooling {c.dual_pooling}: score = inner product of the proxies, 004 App. B)",
                  "gated_segments": f" (query and document side by side, the query cut at {m.query_max_length} tokens; "
                                    f"attention between them gated, closed at the start: score = {c.score_scale:g} x "
                                    "cosine of their mean states, the checkpoint's dense score)"}
        lines.append(f"  cross: head {c.head}" + detail.get(c.head, ""))
    return lines


def _component_lines(recipe: Recipe) -> list[str]:
    """The adapter, the loss and the distillation section."""
    a, loss, k = recipe.adapter, recipe.loss, recipe.distillation
    lines = [f"method: {a.method}" + (f" {json.dumps(a.options, default=str)}" if a.options else "")
             + (" (phases: see hybrid epochs)" if ADAPTERS.get(a.method).trains_in_phases else ""),
             f"loss: {loss.name}" + (f" {json.dumps(loss.options, default=str)}" if loss.options else "")
             + (f" + {loss.reconstruction_weight:g} x token reconstruction (004 §4.2)" if loss.reconstruction_weight
                else "")]
    if k is not None:
        lines.append(f"distillation: {k.teacher_kind} teacher {k.teacher} (pooling {k.teacher_pooling}); weights one-hot "
                     f"{k.one_hot_weight:g}, score ({k.score_loss}) {k.score_weight:g}, query embedding "
                     f"{k.query_embedding_weight:g}, document embedding {k.document_embedding_weight:g}"
                     + ("; documents inherited" if k.inherit_documents else "") + ("; queries only" if k.query_only else ""))
        g = k.generated_queries
        if g is not None:
            lines.append(f"  generated queries (004 App. E): {g.per_query} per training query from {g.model}, sigma "
                         f"{g.sigma:g}, mask probability {g.mask_probability:g}, {g.decoding}; Eq. 7 on them, weight "
                         f"{g.weight:g}")
    return lines


def _data_line(recipe: Recipe) -> str:
    d = recipe.data
    train = f"rows of {d.train} ({d.train_format} form)" if d.train is not None else d.train_split
    # data.train's rows carry their own negatives: data.negatives draws only for the qrels
    negatives = "negative(s) of its rows" if d.train is not None else f"{d.negatives} negative(s)"
    return (f"data: {d.dataset}: train {train}"
            + (f" (at most {d.max_train_queries} queries)" if d.max_train_queries else " (all queries)")
            + f", {d.num_negatives} {negatives} per positive"
            + (f", at most {d.max_positives_per_query} positive(s) per query" if d.max_positives_per_query else "")
            + f"; validation {d.validation_split or 'none'}"
            + (f" ({d.holdout_queries} of its queries, held out of training)" if d.holdout_queries else "")
            + f"; test {d.test_split}"
            + (f"; fold {d.fold}" if d.fold is not None else ""))


def _training_line(recipe: Recipe) -> str:
    """The training budget (steps, epochs, or a hybrid's phases), batch and learning rates, the output folder."""
    t, options, d = recipe.training, recipe.adapter.options, recipe.data
    batch = int(t.get("per_device_train_batch_size", 8))
    if int(t.get("max_steps", -1) or -1) > 0:
        budget = f"{int(t['max_steps'])} steps"
    elif ADAPTERS.get(recipe.adapter.method).trains_in_phases:
        budget = f"{options.get('first_epochs')} + {options.get('second_epochs')} epochs ({options.get('mode', 'sequential')})"
    else:
        budget = f"{float(t.get('num_train_epochs', 3.0)):g} epoch(s)"
    if d.max_train_queries and int(t.get("max_steps", -1) or -1) <= 0:
        budget += f" (≈ {math.ceil(d.max_train_queries / batch)} steps per epoch at one positive per query)"
    head = recipe.model.head_learning_rate
    return (f"training: {budget}, batches of {batch} queries, learning rate {t.get('learning_rate', 5e-5)}"
            + (f", ranker head {head:g}" if head else "") + f"; outputs (not written by --check) in {t.get('output_dir')}")


def _evaluation_line(recipe: Recipe, model_cls) -> str:
    e, d = recipe.eval, recipe.data
    scored = "full retrieval of the corpus" if model_cls.full_retrieval else f"reranking the top-{e.depth} of {e.first_stage}"
    if d.max_documents is not None:
        scored += f" (cut to {d.max_documents:,} documents around the judged ones: data.max_documents)"
    epoch0 = "epoch 0 = the starting model included" if e.start else "the starting model not scored: eval.start false"
    return (f"evaluation: {scored}; metrics {', '.join(e.metrics)}"
            + (f"; validation each epoch ({epoch0}), best by {e.selection_metric}"
               if d.validation_split else "; no validation (the last epoch is kept)")
            + (f"; BM25 interpolation {e.interpolation}" if e.interpolation is not None else "")
            + (f"; dense-sparse fusion (003 Eq. 7) α {e.fusion}" if e.fusion is not None else ""))


def evaluation_plan(recipe: Recipe, full_retrieval: bool, bi_encoder: bool, ranks_untrained: bool | None) -> list[str]:
    """What a run scores besides training, and what it encodes how often: the start (``eval.start``) and the corpus
    encodings (a dense model's, each the longest step of an evaluation). ``ranks_untrained`` None: not known before
    the model is loaded (a cross-encoder's classifier head is trained only in some checkpoints). Logged at the start
    of a run and printed by ``--check``."""
    e, validation = recipe.eval, recipe.data.validation_split
    if not e.start:
        start = ("start: not scored (eval.start: false): no start row in metrics.json"
                 + ("; the best epoch is chosen among the trained epochs only" if validation else ""))
    elif ranks_untrained is False:
        start = "start: not scored (the scoring head starts random, the starting model cannot rank)"
    else:
        start = ("start: the starting model scored on the test split (the start row)"
                 + ("; on validation too (epoch 0 of the selection)" if validation else "")
                 + ("" if ranks_untrained else ", where the checkpoint brings a trained scoring head"))
    starts = e.start and ranks_untrained is not False
    if full_retrieval:
        parts = []
        if starts:
            parts.append("once for the starting model" + (" (the start row and validation epoch 0 share it)"
                                                          if validation else ""))
        if validation:
            parts.append("once per validation (each epoch)")
        parts.append("once for the test split (the last validation's encoding serves when it has the same weights)")
        encodes = "corpus encoded by the document tower: " + "; ".join(parts)
    elif bi_encoder:
        encodes = ("encoded: the distinct documents of the first-stage candidates, once per scoring ("
                   + ", ".join(["start"] * starts + ["each validation"] * bool(validation) + ["test"]) + ")")
    else:
        encodes = ("no corpus encoding: each (query, document) candidate pair scored once per scoring ("
                   + ", ".join(["start"] * starts + ["each validation"] * bool(validation) + ["test"]) + ")")
    return [start, encodes]


def check_recipe(recipe: Recipe) -> tuple[str, str | None]:
    """The printed plan, and why the recipe cannot run here as it is (None: ready, every model and dataset found).
    What would fail at once (a bad model folder, a missing local path) is an SsftError instead."""
    lines, found = plan(recipe)
    fatal = [f for f in found if f.fatal]
    if fatal:
        raise SsftError(f"{recipe.source}: {fatal[0].what}: {fatal[0].name}: {fatal[0].note}")
    lines.append("models and data:")
    lines += [f.line() for f in found]
    missing = [f for f in found if f.where is None]
    if not missing:
        lines.append("ready to train here")
        return "\n".join(lines), None
    lines.append("not ready to train here: see NOT HERE above (nothing was written)")
    first = missing[0]
    more = f" (and {len(missing) - 1} more, see the plan)" if len(missing) > 1 else ""
    return "\n".join(lines), f"{first.what} '{first.name}' is not here: {first.note}{more}"


__all__ = ["REMOTE_DATASETS", "check_recipe", "dataset_status", "evaluation_plan", "inspect_model", "model_status",
           "plan"]

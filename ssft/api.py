"""ssft's front door: train, load, rank, evaluate, retrieve, encode, export and mine from Python.

Every console script is argument parsing plus one call of these functions, so what a CLI does a notebook does with
the same checks, messages and output-folder rules (``ssft.core.run_folder``)::

    import ssft

    run = ssft.train("recipes/quickstart.yaml", {"training.num_train_epochs": 1})
    run.metrics["test"]["nDCG@10"]
    model = ssft.load(run.output_dir)                 # or a hub id / folder of a checkpoint ssft imports
    model.rank("vitamin d", ["a recipe", "bone health and vitamin d"])   # [{"corpus_id": 1, "score": ...}, ...]
    ssft.evaluate(model, "nfcorpus", split="test", first_stage="bm25", depth=100)

``model`` arguments take a loaded ranker (``ssft.load``) or anything ``ssft.load`` takes. ``output`` (where a
function has one) is written as the matching CLI writes its ``--output``; without it nothing is written.

Overrides are one dict of dotted recipe paths (``{"training.learning_rate": 1e-4}``), not keyword arguments: they are
the strings the CLI's ``key=value`` overrides and every recipe error message use, and a dotted path cannot be a
Python keyword name (``training__learning_rate`` would be a third spelling to learn).
"""
from __future__ import annotations

import copy
import functools
import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from huggingface_hub.constants import HF_HUB_CACHE

from ssft.config.recipe import ModelConfig, Recipe, apply_override, load_recipe, recipe_from_dict
from ssft.config.registry import MODELS
from ssft.core import precision as precisions
from ssft.core.arguments import string_list, whole_number
from ssft.core.errors import SsftError, closest, user_path
from ssft.core.hub import ALIASES, PIP_SHIPPED, PIP_SPLIT_ZIP, is_router_folder, read_json_file, resolve_model
from ssft.core.paths import SPEC_FILE
from ssft.core.run_folder import refuse_overlap, unfinished_run_message
from ssft.data.beir import load_dataset as _load_dataset
from ssft.data.trec import read_run
from ssft.models.base import Ranker, load_ranker, saved_model_folder
from ssft.models.interop import openvino
from ssft.models.interop.checkpoint import checkpoint_kind
from ssft.pipeline.corpus_index import DEFAULT_TOKEN_K, Index, build_index, register_model_loader
from ssft.pipeline.encode import encode_corpus
from ssft.pipeline.evaluate import evaluate_datasets
from ssft.pipeline.export import export_run
from ssft.pipeline.mine import mine_negatives
from ssft.pipeline.rerank import rerank
from ssft.pipeline.retrieve import retrieve_corpus
from ssft.pipeline.run import run_recipe

__all__ = ["Index", "Ranker", "Run", "encode", "evaluate", "export", "index", "load", "load_dataset", "mine",
           "read_run", "retrieve", "train"]

# what kind of ranker an imported checkpoint becomes (``ssft.models.interop.checkpoint.checkpoint_kind``)
IMPORTED_ARCHITECTURES = {"sequence-classification": "cross", "multi-vector": "colbert", "colbert-stanford": "colbert",
                          "sentence-transformers": "dense", "transformers": "dense"}
# what a folder holding a model has (one of): a checkpoint, a sentence-transformers model, a saved ssft model, a run
MODEL_MARKERS = ("config.json", "modules.json", SPEC_FILE, "model")


# ---------------------------------------------------------------- train
@dataclass
class Run:
    """A finished training run: its folder and what it wrote there (what ``ssft.train`` returns).

    Attributes:
        output_dir: the run folder.
        metrics: metrics.json (``{"test": {"nDCG@10": ...}, "bm25": {...}, ...}``).
        recipe: the resolved ``Recipe``.
        info: run_info.json.
        model: the trained ranker (loaded on first use).
    """

    output_dir: Path
    metrics: dict[str, Any]
    recipe: Recipe
    info: dict[str, Any] = field(default_factory=dict)

    @functools.cached_property
    def model(self) -> Ranker:
        """The trained ranker (``ssft.load(run.output_dir)``), loaded on first access."""
        return load(self.output_dir, trust_remote_code=bool(self.recipe.model.trust_remote_code))


def _override_items(overrides: Mapping[str, Any] | None) -> list[str]:
    """``{"training.learning_rate": 1e-4}`` as the CLI's ``key=value`` strings (values written as JSON, which YAML
    reads back as the same value), so that both go through one parser and name a wrong key alike."""
    if overrides is None:
        return []
    if not isinstance(overrides, Mapping):
        raise SsftError(f"overrides: expected a dict of dotted recipe paths, e.g. {{'training.learning_rate': 1e-4}}, "
                        f"got {type(overrides).__name__}")
    items = []
    for key, value in overrides.items():
        if not isinstance(key, str):
            raise SsftError(f"overrides: keys are dotted recipe paths (strings), got {key!r}")
        value = str(value) if isinstance(value, Path) else value
        try:
            items.append(f"{key}={json.dumps(value)}")
        except TypeError:
            raise SsftError(f"override '{key}': a {type(value).__name__} is not a recipe value") from None
    return items


def recipe_of(recipe: str | Path | Mapping[str, Any] | Recipe, overrides: Mapping[str, Any] | None = None) -> Recipe:
    """The validated recipe ``train`` runs: a YAML path, a dict of its sections or a ``Recipe``, with ``overrides``."""
    items = _override_items(overrides)
    if isinstance(recipe, (str, Path)):
        return load_recipe(user_path(str(recipe)), items)
    if isinstance(recipe, Recipe):
        if not items:
            return recipe
        raw, source = recipe.to_dict(), recipe.source
    elif isinstance(recipe, Mapping):
        raw, source = copy.deepcopy(dict(recipe)), "<recipe dict>"
    else:
        raise SsftError(f"recipe: expected a YAML path, a dict of recipe sections or a Recipe, got {type(recipe).__name__}")
    for item in items:
        apply_override(raw, item)
    return recipe_from_dict(raw, source=source)


def train(recipe: str | Path | Mapping[str, Any] | Recipe, overrides: Mapping[str, Any] | None = None, *,
          overwrite: bool = False, resume_with_changes: bool = False) -> Run:
    """Train and evaluate what ``recipe`` describes (``ssft-train``). The run folder (``training.output_dir``) follows
    ssft-train's rules: a killed run resumes, a finished one is refused unless ``overwrite``.

    Args:
        recipe: a YAML path, a dict of the recipe's sections, or a ``Recipe``.
        overrides: a dict of dotted recipe paths (``{"training.learning_rate": 1e-4}``), applied as the CLI's
            ``key=value`` overrides are.
        overwrite: train a finished run again from scratch.
        resume_with_changes: resume a run whose optimiser settings changed.

    Returns:
        The finished ``Run``: its folder, metrics, recipe, run info and (loaded on first use) model.

    Examples:
        >>> run = ssft.train("recipes/quickstart.yaml", {"training.num_train_epochs": 1})
        >>> run.metrics["test"]["nDCG@10"], run.output_dir
    """
    if overwrite and resume_with_changes:
        raise SsftError("overwrite starts over and resume_with_changes continues: pass one of them")
    resolved = recipe_of(recipe, overrides)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    metrics = run_recipe(resolved, overwrite=overwrite, resume_with_changes=resume_with_changes)
    out = resolved.output_dir
    info_file = out / "run_info.json"
    info = read_json_file(info_file) if info_file.is_file() else {}
    return Run(output_dir=out, metrics=metrics, recipe=resolved, info=info if isinstance(info, dict) else {})


# ---------------------------------------------------------------- load
def load(model: str | Path | Ranker, precision: str = precisions.DEFAULT, trust_remote_code: bool = False, *,
         backend: str | None = None, calibration: Sequence[str | tuple[str, str]] | None = None) -> Ranker:
    """A ranker ready to score, with every weight frozen.

    Args:
        model: a run folder of ssft-train, a saved ssft model folder, or any checkpoint ssft imports, by folder or hub
            id (a sequence-classification cross-encoder, a sentence-transformers model incl. Router towers, a PyLate /
            ColBERT folder); or a loaded ranker (a copy is served as asked). Offline, a hub id resolves from the local
            Hugging Face cache.
        precision: auto (bf16 where the device computes it natively, else fp32), fp32, bf16 or int8.
        trust_remote_code: your permission to run code the model ships.
        backend: ``torch``, ``openvino`` (the transformer run by OpenVINO's CPU runtime; ``pip install
            'ssft[openvino]'``) or ``auto`` (openvino where it is installed and the model converts); None: torch (a
            conversion costs seconds at every load: name openvino for a model that serves long), openvino for int8:
            int8 runs on OpenVINO.
        calibration: int8 only: the texts (a bi-encoder's documents) or (query, document) pairs from the corpus you
            serve that OpenVINO's static quantisation is calibrated on. A cross-encoder then checks its int8 scores
            against float on a few whole queries of these pairs and, where int8 moved them too far, serves at bf16
            (fp32 without native bf16) instead, with a warning: ``model.serving_backend`` tells which (``openvino:int8``,
            ``openvino:bf16``). Pairs with no query of 3 or more are served at int8 unchecked (an INFO line says so).

    Returns:
        The ``Ranker`` (``rank``, ``predict``, ``encode_query`` / ``encode_document`` for a bi-encoder).

    Examples:
        >>> model = ssft.load("runs/quickstart")
        >>> model.rank("vitamin d", ["a recipe", "bone health and vitamin d"], top_k=1)
        [{'corpus_id': 1, 'score': 3.1}]
        >>> model.predict([("vitamin d", "bone health")])      # one score per pair
        >>> ssft.load("sentence-transformers/all-MiniLM-L6-v2").encode_query(["vitamin d"]).shape   # (1, 384)
        >>> ssft.load("runs/quickstart", precision="int8", calibration=pairs)   # OpenVINO int8; pairs from your corpus
    """
    precision = precisions.check(precision, "precision")
    backend = openvino.check_serving(backend or ("openvino" if precision == "int8" else "torch"), precision, "backend")
    # a loaded ranker: a copy served as asked (the caller's stays as it was); a saved model: its path
    ranker = model_input(model, trust_remote_code)
    if not isinstance(ranker, Ranker):
        ranker = load_ranker(saved_model_folder(ranker), trust_remote_code=trust_remote_code)
    ranker.eval()
    ranker.requires_grad_(False)
    ranker, _, _ = openvino.serve(ranker, backend, precision, calibration, where="backend")
    return ranker


def _import_checkpoint(name: str, trust_remote_code: bool, pooling: str | None = None, max_length: int | None = None,
                       query_max_length: int | None = None) -> Ranker:
    """A checkpoint ssft did not save, as the ranker its files describe (the lengths its sentence-transformers config
    gives, else 256 tokens; a bi-encoder's queries as long as its documents, as sentence-transformers encodes them).
    ``pooling``, ``max_length``, ``query_max_length``: set instead of those (None: as just said; pooling mean)."""
    folder = resolve_model(name)
    kind, _ = checkpoint_kind(folder)
    architecture = IMPORTED_ARCHITECTURES.get(kind, "dense")
    st_config = folder / "sentence_bert_config.json"
    length = 256
    if st_config.is_file():
        value = read_json_file(st_config)
        if isinstance(value, dict) and isinstance(value.get("max_seq_length"), int) and value["max_seq_length"] > 0:
            length = value["max_seq_length"]
    for flag, given in (("max_length", max_length), ("query_max_length", query_max_length)):
        if given is not None:
            whole_number(given, flag)
    if pooling is not None and architecture != "dense":
        raise SsftError(f"pooling: {name} imports as a '{architecture}' model; pooling applies to a dense checkpoint")
    length = max_length or length
    query_length = query_max_length or (ModelConfig.query_max_length if architecture == "colbert" else length)
    options = {} if pooling is None else {"pooling": pooling}
    cfg = ModelConfig(architecture=architecture, name=name, max_length=length, query_max_length=query_length,
                      trust_remote_code=trust_remote_code, options=options)
    return MODELS.get(architecture).build(cfg, "full", {})


def _model_path(model: Any, name: str = "model") -> Path:
    """``model`` named by a path or a hub id (a string or a ``Path``), else a one-line error naming the argument."""
    if not isinstance(model, (str, Path)):
        raise SsftError(f"{name}: expected a loaded ranker (ssft.load), a folder or a hub id, got "
                        f"{type(model).__name__}")
    return user_path(str(model))


def _looks_like_a_path(text: str) -> bool:
    """A name only a folder can be (``/abs``, ``./x``, ``~/x``, ``a/b/c``, ``x/``), never a hub id (``org/name``)."""
    return (os.path.isabs(text) or text.startswith((".", "~")) or text.count("/") > 1 or text.endswith("/")
            or os.sep != "/" and os.sep in text)


def _known_model_names(name: str) -> list[str]:
    """What a mistyped model name may have meant: the hub ids and aliases ssft finds offline, the models of the
    local Hugging Face cache, and the folders beside the one named."""
    names = [*ALIASES, *ALIASES.values(), *PIP_SHIPPED, *PIP_SPLIT_ZIP]
    try:
        names += [entry.name[len("models--"):].replace("--", "/") for entry in Path(HF_HUB_CACHE).glob("models--*")]
    except OSError:
        pass
    parent = Path(name).expanduser().parent
    try:
        names += [str(parent / entry.name) if str(parent) != "." else entry.name for entry in parent.iterdir()
                  if entry.is_dir() and any((entry / marker).exists() for marker in MODEL_MARKERS)]
    except OSError:
        pass
    return names


def model_input(model: str | Path | Ranker, trust_remote_code: bool = False, *, output: str | Path | None = None,
                output_flag: str = "output", name: str = "model", pooling: str | None = None,
                max_length: int | None = None, query_max_length: int | None = None) -> Path | Ranker:
    """The one resolver of a model argument, for every API function and console script that takes one: whatever
    ``ssft.load`` takes, as the pipelines take it.

    Args:
        model: a loaded ranker; a run folder of ssft-train or a saved ssft model folder; or a checkpoint ssft imports,
            by folder or hub id (offline: from the local Hugging Face cache or a pip-shipped copy).
        trust_remote_code: allow a checkpoint's own code.
        output: the output the command writes, refused where it is, holds or lies inside an imported checkpoint's
            folder (a saved model's folder is refused by the command itself).
        output_flag: how error messages name ``output`` (``--output`` on the command line).
        name: how error messages name ``model``.
        pooling: a dense checkpoint's pooling (mean or cls; None: mean).
        max_length: a checkpoint's document tokens (None: its sentence-transformers max_seq_length, else 256).
        query_max_length: a checkpoint's query tokens (None: as its documents; ColBERT 32).

    Returns:
        A copy of a loaded ranker (serving switches its precision and backend; the caller's stays as it was), the
        path of a saved ssft model (loaded by the command after its cheaper checks, never written into), or an
        imported checkpoint as a ranker (in eval mode, every weight frozen).
    """
    if isinstance(model, Ranker):
        return openvino.serving_copy(model)
    path = _model_path(model, name)
    if saved_model_folder(path) is not None:
        return path
    unfinished = unfinished_run_message(path)
    if unfinished is not None:
        raise SsftError(unfinished)
    text = str(model)
    if path.exists():
        if not (path.is_dir() and ((path / "config.json").is_file() or is_router_folder(path))):
            raise SsftError(f"{path}: no trained model: not a run folder or saved ssft model (expected "
                            f"{path}/model/{SPEC_FILE}), nor a checkpoint (config.json)")
        if output is not None:
            refuse_overlap(Path(output), [(path, "the model folder being read")], output_flag)
    elif _looks_like_a_path(text):
        raise SsftError(f"{name} not found: {path}: no such folder (a run folder, a saved ssft model or a "
                        f"checkpoint folder){closest(text, _known_model_names(text))}")
    try:
        ranker = _import_checkpoint(text, trust_remote_code, pooling, max_length, query_max_length)
    except SsftError as err:
        if str(err).startswith(f"model '{text}' not found"):
            raise SsftError(f"{err}{closest(text, _known_model_names(text))}") from None
        raise
    ranker.eval()
    ranker.requires_grad_(False)
    return ranker


def model_label(model: str | Path | Ranker) -> str | None:
    """How tables name a model given by path or hub id (its folder's or repository's last part; a run's model/: the
    run's); None for a loaded ranker."""
    if isinstance(model, Ranker):
        return None
    path = Path(str(model).rstrip("/"))
    return path.parent.name if path.name == "model" and saved_model_folder(path) is not None else path.name


def _dataset(dataset: Any) -> str:
    """A dataset named by a string (a BEIR folder or name, a hub or ir_datasets id) or a ``Path``; else a one-line
    error naming the argument."""
    if not isinstance(dataset, (str, Path)) or not str(dataset).strip():
        raise SsftError(f"dataset: expected a dataset name or path, got {dataset!r}"[:200])
    return str(dataset)


def _output(output: Any, name: str = "output", required: bool = False) -> Path | None:
    """``output`` as a path; None means "write nothing" where that is allowed, else it is refused (never a folder
    named ``None``)."""
    if output is None and not required:
        return None
    if not isinstance(output, (str, Path)) or not str(output).strip():
        raise SsftError(f"{name}: expected a folder path (a string or a Path), got {output!r}")
    return user_path(str(output))


# ---------------------------------------------------------------- evaluate, retrieve, encode
def evaluate(model: str | Path | Ranker, dataset: str | Sequence[str], split: str = "test", first_stage: str = "bm25",
             depth: int = 100, metrics: str | Sequence[str] | None = None, output: str | Path | None = None, *,
             batch_size: int = 64, precision: str = precisions.DEFAULT, overwrite: bool = False,
             trust_remote_code: bool = False, queries: str = "judged", backend: str = "auto") -> dict[str, Any]:
    """Rerank a first stage of ``dataset``'s ``split`` with ``model`` and score it (``ssft-rerank``), or retrieve over
    the whole corpus (``first_stage="full"``). Several datasets (a list) give the multi-dataset table of ``ssft-eval``
    (first stage ``bm25`` or ``full``; nDCG@10 and R@100 unless ``metrics``; a metric whose cutoff is deeper than
    ``depth`` is not computed for the model).

    Args:
        model: a loaded ranker (``ssft.load``) or anything ``ssft.load`` takes.
        dataset: a dataset name, BEIR folder, hub id or ``ir_datasets`` id; or a list of them (``ssft-eval``'s table).
        split: the qrels split scored (e.g. ``test``).
        first_stage: ``bm25``, a TREC run file (one dataset), or ``full`` (a dense or ColBERT model retrieves over the
            whole corpus, as ``ssft.retrieve``).
        depth: the first stage's top-k reranked (or the documents retrieved per query with ``full``).
        metrics: ir_measures names (a list or comma-separated); None: the command's defaults.
        output: a folder to write the results into, as the CLI's ``--output``; None writes nothing.
        batch_size: pairs or texts scored per forward pass.
        precision: auto, fp32, bf16 or int8.
        overwrite: replace an earlier result in ``output`` (only what the command wrote).
        trust_remote_code: allow a checkpoint's own code.
        queries: one dataset: average over every ``judged`` query of the split (a query the first stage lacks
            scoring 0) or only over the queries the first stage has (``run``), as ``ssft-rerank --average-over``.
        backend: auto (OpenVINO where it is installed and the job repays the conversion), torch or openvino, as
            ``ssft-rerank --backend``.

    Returns:
        One dataset: metrics.json's content, ``{split: {...}, first_stage_name: {...}}``. A list: what ``ssft-eval``'s
        eval.json holds (per dataset the model's and BM25's metrics and the paired tests, and their mean).

    Examples:
        >>> ssft.evaluate("runs/quickstart", "nfcorpus", split="test", first_stage="bm25", depth=100)["test"]["nDCG@10"]
    """
    out = _output(output)
    if split is None or not isinstance(split, str):
        raise SsftError(f"split: evaluate scores a split with qrels (e.g. 'test'), got {split!r}; to rank queries "
                        f"without qrels use model.rank({{query id: text}}, candidate run, corpus={{id: text}})")
    if isinstance(dataset, Path):
        dataset = str(dataset)
    if dataset is None or isinstance(dataset, (bytes, Mapping)) or not isinstance(dataset, (str, Sequence)):
        raise SsftError(f"dataset: expected a dataset name or path, or a list of them, got {type(dataset).__name__}")
    if not isinstance(dataset, str):
        kwargs = {} if metrics is None else {"metrics": string_list(metrics, "metrics")}
        return evaluate_datasets(model_input(model, trust_remote_code, output=out), list(dataset),
                                 first_stage=first_stage, depth=depth, split=split, batch_size=batch_size,
                                 precision=precision, output_dir=out, overwrite=overwrite,
                                 trust_remote_code=trust_remote_code, backend=backend, model_name=model_label(model),
                                 **kwargs)
    if not isinstance(first_stage, (str, Path)):
        raise SsftError(f"first_stage: expected bm25, full or a TREC run file, got {type(first_stage).__name__}")
    whole_number(depth, "depth")
    ranker = model_input(model, trust_remote_code, output=out)
    if first_stage == "full":
        return retrieve_corpus(ranker, dataset, split, out, depth=depth, metrics=metrics, batch_size=batch_size,
                               precision=precision, overwrite=overwrite, trust_remote_code=trust_remote_code,
                               backend=backend)
    return rerank(ranker, dataset, str(first_stage), split, out, depth=depth, metrics=metrics, batch_size=batch_size,
                  overwrite=overwrite, trust_remote_code=trust_remote_code, queries=queries, precision=precision,
                  backend=backend)


def retrieve(model: str | Path | Ranker, dataset: str, split: str = "test", depth: int = 100,
             index_dir: str | Path | None = None, output: str | Path | None = None, *, index: str = "flat",
             passage_words: int | None = None, passage_stride: int | None = None,
             metrics: str | Sequence[str] | None = None, fusion: float | str | None = None, tune_split: str | None = None,
             tune_metric: str = "nDCG@10", documents_from: str | None = None, teacher_pooling: str = "mean",
             batch_size: int = 64, precision: str | None = None, overwrite: bool = False,
             trust_remote_code: bool = False, token_k: int | None = None, backend: str | None = None) -> dict[str, Any]:
    """Retrieve the top-``depth`` documents of every query of ``split`` from the whole corpus with a dense or ColBERT
    model (``ssft-retrieve``): the corpus encoded now into a faiss ``index``, or the index ``ssft.encode`` built in
    ``index_dir``. A ColBERT model's index is over token vectors: each query token fetches ``token_k`` document tokens,
    their documents scored by exact MaxSim.

    Args:
        model: a loaded ranker (``ssft.load``) or anything ``ssft.load`` takes; dense or ColBERT.
        dataset: a dataset name, BEIR folder, hub id or ``ir_datasets`` id.
        split: the qrels split whose queries are retrieved and scored.
        depth: documents retrieved per query.
        index_dir: a folder ``ssft.encode`` / ``ssft-encode`` built (no corpus encoding; its passage settings and,
            unless ``precision`` is given, its precision apply).
        output: a folder to write run.trec, per-query metrics and metrics.json into; None writes nothing.
        index: the faiss index built now: flat (exact), ivf, hnsw, pq or ivfpq.
        passage_words: split documents into passages of this many words, each document scored by its best passage
            (maxP); None: whole documents.
        passage_stride: words between passage starts (default ``passage_words``).
        metrics: ir_measures names (a list or comma-separated); None: the defaults.
        fusion: fuse with BM25 (alpha * BM25 + dense over the union of both lists) by a weight alpha >= 0, or
            ``"auto"``: tuned on ``tune_split``; None: no fusion.
        tune_split: with ``fusion="auto"``: the split alpha is tuned on (e.g. ``dev``).
        tune_metric: with ``fusion="auto"``: the metric alpha maximises.
        documents_from: encode the documents with this dense model instead (a saved ssft dense model, or a sentence
            embedder by hub id or folder): its index serves ``model``'s queries.
        teacher_pooling: pooling of a ``documents_from`` model given by name (mean or cls).
        batch_size: texts encoded at once.
        precision: auto, fp32, bf16 or int8 (None: the index's with ``index_dir``, else auto).
        overwrite: replace an earlier result in ``output`` (only what ssft-retrieve wrote).
        trust_remote_code: allow a checkpoint's own code.
        token_k: ColBERT only: document tokens fetched per query token (None: 512).
        backend: auto, torch or openvino (None: the index's, else auto), as ``ssft-retrieve --backend``.

    Returns:
        metrics.json's content, ``{split: {...}}``; with fusion also ``bm25`` and the fused row.

    Examples:
        >>> ssft.retrieve("runs/dense", "scifact", split="test", depth=100)["test"]["R@100"]
    """
    out = _output(output)
    if split is None or not isinstance(split, str):
        raise SsftError(f"split: retrieve scores a split with qrels (e.g. 'test'), got {split!r}")
    whole_number(depth, "depth")
    return retrieve_corpus(model_input(model, trust_remote_code, output=out), _dataset(dataset), split, out, depth=depth,
                           index=index, index_dir=None if index_dir is None else user_path(str(index_dir)),
                           passage_words=passage_words, passage_stride=passage_stride, metrics=metrics,
                           fusion=None if fusion is None else str(fusion), tune_split=tune_split,
                           tune_metric=tune_metric, documents_from=documents_from, teacher_pooling=teacher_pooling,
                           batch_size=batch_size, precision=precision, overwrite=overwrite,
                           trust_remote_code=trust_remote_code, token_k=token_k, backend=backend)


def encode(model: str | Path | Ranker, dataset: str, output: str | Path, index: str | None = "flat", *,
           nprobe: int | None = None, shard_size: int = 10_000, batch_size: int = 64, passage_words: int | None = None,
           passage_stride: int | None = None, precision: str = precisions.DEFAULT,
           trust_remote_code: bool = False, backend: str = "auto") -> dict[str, Any]:
    """Encode ``dataset``'s corpus with a dense or ColBERT model's document tower (a ColBERT model: every document's
    token vectors) into float16 shards under ``output`` and build its faiss index, as ``ssft-encode`` does; a killed
    run called again resumes. ``ssft.retrieve(model, dataset, index_dir=output)`` then retrieves without encoding again.

    Args:
        model: a loaded ranker (``ssft.load``) or anything ``ssft.load`` takes; dense or ColBERT.
        dataset: a dataset name, BEIR folder, hub id or ``ir_datasets`` id.
        output: the folder the shards and the index are written into.
        index: the faiss index: flat, ivf, hnsw, pq, ivfpq or an index_factory string; None: shards only.
        nprobe: IVF lists searched per query, kept in index.json (None: the fewest lists that find 0.99 of the
            exact top-100 of stored vectors searched as queries, calibrated when the index is built).
        shard_size: documents (or passages) per shard.
        batch_size: texts encoded at once.
        passage_words: split documents into passages of this many words; None: whole documents.
        passage_stride: words between passage starts (default ``passage_words``).
        precision: auto, fp32, bf16 or int8.
        trust_remote_code: allow a checkpoint's own code.
        backend: auto, torch or openvino, as ``ssft-encode --backend`` (int8 runs on openvino, calibrated on the
            corpus encoded).

    Returns:
        ``{"manifest": ..., "index": ...}``: the shards' manifest and, with an index, its index.json (None without).

    Examples:
        >>> ssft.encode("runs/dense", "scifact", output="index/", index="flat")["index"]["vectors"]
    """
    out = _output(output, required=True)
    return encode_corpus(model_input(model, trust_remote_code, output=out), _dataset(dataset), out, index=index or "flat",
                         build_index=index is not None, nprobe=nprobe, shard_size=shard_size, batch_size=batch_size,
                         passage_words=passage_words, passage_stride=passage_stride, precision=precision,
                         trust_remote_code=trust_remote_code, backend=backend,
                         model_name=str(model) if isinstance(model, (str, Path)) else None)


# ---------------------------------------------------------------- your own queries over your own corpus
def index(model: str | Path | Ranker, corpus: str | Path | Sequence[str], path: str | Path | None = None, *,
          ids: Sequence[str] | None = None, kind: str = "flat", batch_size: int = 64,
          precision: str = precisions.DEFAULT, backend: str | None = None, token_k: int | None = None,
          trust_remote_code: bool = False) -> Index:
    """Index ``corpus`` with a dense or ColBERT ``model`` once, to search it with any query afterwards
    (``Index.search``, shaped as sentence-transformers' ``util.semantic_search``).

    Args:
        model: a loaded ranker (``ssft.load``) or anything ``ssft.load`` takes; dense or ColBERT.
        corpus: a dataset name, a BEIR folder, a ``.jsonl`` (``{"_id", "title", "text"}`` lines) or ``.tsv``
            (``id<TAB>text`` or ``id<TAB>title<TAB>text``) file, or a list of texts.
        path: a folder to keep the index in (written as ``ssft-encode`` writes one, reopened with
            ``ssft.Index.load(path)``); None keeps it in memory only.
        ids: one id per text of a list ``corpus`` (default: their positions, as ``semantic_search`` names them).
        kind: the faiss index: ``flat`` (exact), ``ivf``, ``hnsw``, ``pq``, ``ivfpq`` or a factory string.
        batch_size: texts encoded at once.
        precision: auto, fp32, bf16 or int8 (int8 runs on OpenVINO, calibrated on the corpus).
        backend: auto, torch or openvino (None: auto).
        token_k: ColBERT only: document tokens fetched per query token (default 512).
        trust_remote_code: allow a checkpoint's own code.

    Returns:
        An ``ssft.Index``: ``.search(queries, top_k=10)`` gives ``[[{"corpus_id", "score"}, ...], ...]``.

    Examples:
        >>> idx = ssft.index("sentence-transformers/all-MiniLM-L6-v2", ["bone health", "a recipe"])
        >>> idx.search("vitamin d and bones", top_k=1)   # [[{"corpus_id": 0, "score": ...}]]
    """
    out = _output(path, "path")
    model_name = str(model) if isinstance(model, (str, Path)) else None
    ranker = model_input(model, trust_remote_code, output=out, output_flag="path")
    return build_index(ranker, corpus, out, ids=ids, kind=kind, model_name=model_name,
                       batch_size=whole_number(batch_size, "batch_size"), precision=precision, backend=backend,
                       token_k=whole_number(token_k, "token_k") if token_k is not None else DEFAULT_TOKEN_K,
                       trust_remote_code=trust_remote_code)


def load_dataset(name: str | Path, split: str | None = "test") -> tuple[dict[str, dict[str, str]], dict[str, str],
                                                                         dict[str, dict[str, int]]]:
    """A dataset's ``(corpus, queries, qrels)`` in BEIR's shapes: ``{doc id: {"title", "text"}}``, ``{query id:
    text}``, ``{query id: {doc id: grade}}`` of ``split`` (None: no qrels, ``{}``).

    Args:
        name: a dataset name under ``$SSFT_DATA_HOME`` (e.g. ``nfcorpus``), a BEIR folder, or any dataset
            ``ssft-eval --data`` takes.
        split: the qrels split (``train``, ``dev``, ``test``), or None.

    Returns:
        ``(corpus, queries, qrels)``.
    """
    if not isinstance(name, (str, Path)) or not str(name).strip():
        raise SsftError(f"name: expected a dataset name or folder, got {name!r}")
    dataset = _load_dataset(str(name))
    corpus = {d: {"title": doc.title, "text": doc.text} for d, doc in dataset.corpus.items()}
    qrels = {q: dict(docs) for q, docs in dataset.qrels(split).items()} if split is not None else {}
    return corpus, dict(dataset.queries), qrels


register_model_loader(lambda name: load(name))


# ---------------------------------------------------------------- export, mine
def export(run: str | Path | Run, output: str | Path, format: str = "auto", overwrite: bool = False,
           push_to_hub: str | None = None, *, private: bool = False, trust_remote_code: bool = False) -> dict[str, Any]:
    """Write a trained run's model (or a saved model folder, or a checkpoint ssft imports) in the format
    sentence-transformers, PyLate and transformers load (``ssft-export``), with a model card (a training run's recipe
    and metrics in it).

    Args:
        run: a ``Run`` (``ssft.train``), a run folder, a saved ssft model folder, or a checkpoint by folder or hub id.
        output: the folder to write (new, empty, or an earlier ssft-export).
        format: auto (by architecture), cross-encoder, sentence-transformers, multi-vector, or openvino (the
            architecture's format plus the OpenVINO IR of its transformer(s), ``openvino/openvino_model.xml``, which
            sentence-transformers loads with ``backend="openvino"``).
        overwrite: replace an earlier ssft-export in ``output`` (only what it wrote).
        push_to_hub: a hub repository id to upload the export to (needs a token); None: no upload.
        private: with ``push_to_hub``: create the repository private.
        trust_remote_code: allow a checkpoint's own code.

    Returns:
        What was written: ``format``, ``output``, ``loader`` (the sentence-transformers class that loads it),
        ``notes``.

    Examples:
        >>> ssft.export(run, "exports/quickstart")["loader"]        # e.g. 'CrossEncoder'
    """
    out = _output(output, required=True)
    source = run.output_dir if isinstance(run, Run) else model_input(run, trust_remote_code, output=out, name="run")
    if isinstance(source, Ranker):  # a checkpoint ssft imports: saved as the ssft model it reads as, then exported
        with tempfile.TemporaryDirectory(prefix="ssft-export-") as tmp:
            source.save(Path(tmp) / "model")
            return export_run(Path(tmp) / "model", out, format, overwrite=overwrite, push_to_hub=push_to_hub,
                              trust_remote_code=trust_remote_code, private=private)
    return export_run(source, out, format, overwrite=overwrite, push_to_hub=push_to_hub,
                      trust_remote_code=trust_remote_code, private=private)


def mine(dataset: str, output: str | Path, split: str = "train", model: str | Path | Ranker | None = None,
         bm25: bool = True, depth: int = 100, *, range_min: int = 1, range_max: int | None = None,
         absolute_margin: float | None = None, relative_margin: float | None = None, max_score: float | None = None,
         num_negatives: int | None = None, min_negatives: int = 1, min_relevance: int = 1, form: str | None = None,
         teacher: str | Path | Ranker | None = None, pooling: str | None = None, max_length: int | None = None,
         query_max_length: int | None = None, batch_size: int = 64, precision: str = precisions.DEFAULT,
         backend: str = "auto", overwrite: bool = False, trust_remote_code: bool = False,
         command: Sequence[str] | None = None) -> dict[str, Any]:
    """Mine hard negatives for the judged queries of ``split`` (``ssft-mine``): BM25 (no ``model``) or a dense
    ``model`` over the whole corpus, filtered (rank range, margins to the positive, maximum score, at most
    ``num_negatives``), optionally rescored by a ``teacher`` run; writes ``output`` (.jsonl, the form ``data.train``
    reads) and its ``.mining.json``.

    Args:
        dataset: a dataset name, BEIR folder, hub id or ``ir_datasets`` id.
        output: the ``.jsonl`` file to write (never inside the dataset's folder).
        split: the qrels split whose judged queries are mined.
        model: a dense miner: a loaded ranker or anything ``ssft.load`` takes; None: BM25.
        bm25: mine with BM25 when no ``model`` is given (False without a model is refused).
        depth: candidates retrieved per query.
        range_min: the best rank a negative may have (1 = top).
        range_max: the worst rank a negative may have (None: ``depth``).
        absolute_margin: keep a candidate scoring at most the positive's score minus this.
        relative_margin: keep a candidate scoring at most the positive's score times (1 - this).
        max_score: keep a candidate scoring at most this.
        num_negatives: keep at most this many negatives per row, best first.
        min_negatives: drop rows left with fewer negatives.
        min_relevance: the qrels grade counted as a positive.
        form: ``ids`` or ``scored`` (None: scored with a ``teacher``, else ids).
        teacher: the model that rescores the kept pairs (a cross-encoder, typically): anything ``ssft.load`` takes,
            or a loaded ranker.
        pooling: pooling of a dense checkpoint given by folder or hub id (mean or cls; None: mean).
        max_length: document tokens of a checkpoint (None: its sentence-transformers max_seq_length, else 256).
        query_max_length: query tokens of a checkpoint (None: as its documents).
        batch_size: texts encoded or pairs scored at once.
        precision: what the dense miner and the teacher compute in: auto, fp32, bf16 or int8 (int8: calibrated on the
            queries and corpus encoded, and on the pairs rescored).
        backend: auto (OpenVINO where it is installed and the job repays the conversion), torch or openvino, as
            ``ssft-mine --backend``.
        overwrite: replace an earlier ssft-mine output and its .mining.json (never a file ssft-mine did not write).
        trust_remote_code: allow a checkpoint's own code.
        command: the command line recorded in .mining.json (default: this call).

    Returns:
        The .mining.json content: the miner, the filters, rows, negatives, what each filter removed, ``output``.

    Examples:
        >>> ssft.mine("nfcorpus", "mined.jsonl", split="train", depth=100, num_negatives=8)["rows"]
    """
    if model is None and not bm25:
        raise SsftError("mine: give a dense model, or bm25=True")
    out = _output(output, required=True)
    miner = None
    if model is not None:
        miner = model_input(model, trust_remote_code, output=out, pooling=pooling, max_length=max_length,
                            query_max_length=query_max_length)
        if isinstance(miner, Ranker) and not miner.full_retrieval:
            raise SsftError(f"model: {model_label(model) or 'the model'} is a '{miner.architecture}' model; mining "
                            f"over the corpus needs a dense model (or BM25)")
    return mine_negatives(_dataset(dataset), out, split=split, model=miner, depth=depth, range_min=range_min,
                          range_max=range_max, absolute_margin=absolute_margin, relative_margin=relative_margin,
                          max_score=max_score, num_negatives=num_negatives, min_negatives=min_negatives,
                          min_relevance=min_relevance, form=form,
                          teacher=None if teacher is None else model_input(teacher, trust_remote_code, output=out,
                                                                           name="teacher"), batch_size=batch_size,
                          precision=precision, backend=backend, overwrite=overwrite, trust_remote_code=trust_remote_code,
                          command=list(command) if command is not None else ["ssft.mine", str(dataset), str(output)])

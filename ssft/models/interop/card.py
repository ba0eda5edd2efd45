"""The model card of an export (``README.md``), built with the hub's own tooling (``huggingface_hub.ModelCard`` /
``ModelCardData`` / ``EvalResult``) so that the hub and ``ModelCard.load`` read its metadata back.

What a hub user can trust it for:

- ``model-index`` holds this model's own results only: the row of metrics.json named like the test split. The first
  stage (BM25), the model interpolated with it and the starting model are reference points: they appear in the text's
  table, labelled, never as this model's results.
- ``datasets`` names hub ids only: a BEIR dataset named by its short name (``nfcorpus``) becomes ``BeIR/nfcorpus``, a
  hub id stays; a local folder or an ir_datasets id is named in the text only.
- The load snippet names the hub repository when the export is pushed; otherwise a placeholder the text says to
  replace.
- Hyper-parameters, loss, method, the precision the reported metrics were computed in against the precision of the
  exported weights, the library versions of the run and of the export, and BibTeX of the papers behind the method.
  Numbers are rounded to 4 digits.
"""
from __future__ import annotations

import importlib.metadata
import math
import platform
from pathlib import Path
from typing import Any

from huggingface_hub import ModelCard, ModelCardData
from huggingface_hub.repocard_data import EvalResult

TAGS = ("ssft",)
DIGITS = 4
PLACEHOLDER = "path/to/this/folder"
# BEIR datasets by the short name ssft resolves under $SSFT_DATA_HOME -> their hub copies (BeIR/<name>)
BEIR_HUB_IDS = {name: f"BeIR/{name}" for name in (
    "nfcorpus", "scifact", "fiqa", "arguana", "scidocs", "trec-covid", "quora", "nq", "hotpotqa", "msmarco",
    "climate-fever", "dbpedia-entity", "fever", "webis-touche2020")}
VERSIONED = ("ssft", "torch", "transformers", "peft", "sentence-transformers", "huggingface_hub")
USAGE = {
    "CrossEncoder": ("from sentence_transformers import CrossEncoder\n"
                     "model = CrossEncoder(\"{path}\")  # identity activation: scores are ssft's logits\n"
                     "scores = model.predict([(\"a query\", \"a document\")])"),
    "SentenceTransformer": ("from sentence_transformers import SentenceTransformer\n"
                            "model = SentenceTransformer(\"{path}\")\n"
                            "q = model.encode_query([\"a query\"])\nd = model.encode_document([\"a document\"])\n"
                            "scores = model.similarity(q, d)"),
    "MultiVectorEncoder": ("from sentence_transformers import MultiVectorEncoder\n"
                           "model = MultiVectorEncoder(\"{path}\")\n"
                           "q = model.encode_query([\"a query\"])\nd = model.encode_document([\"a document\"])\n"
                           "scores = model.similarity(q, d)  # MaxSim"),
}
# the papers behind a run (README's list); DOIs where the papers carry one
BIBTEX = {
    "semi_siamese": """@inproceedings{jung2022semisiamese,
  title = {Semi-Siamese Bi-encoder Neural Ranking Model Using Lightweight Fine-Tuning},
  author = {Jung, Euna and Choi, Jaekeol and Rhee, Wonjong},
  booktitle = {Proceedings of the ACM Web Conference 2022 (WWW '22)},
  year = {2022},
  doi = {10.1145/3485447.3511978}
}""",
    "daft": """@misc{leonhardt2022daft,
  title = {Distribution-Aligned Fine-Tuning for Efficient Neural Retrieval},
  author = {Leonhardt, Jurek and Jahnke, Marcel and Anand, Avishek},
  year = {2022}
}""",
    "query_distillation": """@misc{wang2023querydistillation,
  title = {Query Encoder Distillation via Embedding Alignment is a Strong Baseline Method to Boost Dense Retriever
           Online Efficiency},
  author = {Wang, Yuxuan and Lyu, Hong},
  year = {2023}
}""",
    "tct_colbert": """@inproceedings{lin2021tctcolbert,
  title = {Distilling Dense Representations for Ranking using Tightly-Coupled Teachers},
  author = {Lin, Sheng-Chieh and Yang, Jheng-Hong and Lin, Jimmy},
  booktitle = {Proceedings of the 6th Workshop on Representation Learning for NLP (RepL4NLP-2021)},
  year = {2021},
  doi = {10.18653/v1/2021.repl4nlp-1.17}
}""",
    "embeddistill": """@misc{kim2023embeddistill,
  title = {EmbedDistill: A Geometric Knowledge Distillation for Information Retrieval},
  author = {Kim, Seungyeon and Rawat, Ankit Singh and Zaheer, Manzil and Jayasumana, Sadeep and
            Sadhanala, Veeranjaneyulu and Jitkrittum, Wittawat and Menon, Aditya Krishna and Fergus, Rob and
            Kumar, Sanjiv},
  year = {2023}
}""",
}


def rounded(value: float) -> float:
    """A metric as the card prints it: 4 digits after the point."""
    return round(float(value), DIGITS)


def dataset_hub_id(dataset: str | None) -> str | None:
    """The hub id of the dataset a recipe names: a BEIR short name's ``BeIR/<name>``, a hub id (``owner/name``, not a
    path here) as it is; None for a local folder, an ir_datasets id or an unknown name (named in the text only)."""
    if not dataset or dataset.startswith("irds:") or dataset.startswith((".", "/", "~")):
        return None
    if dataset in BEIR_HUB_IDS:
        return BEIR_HUB_IDS[dataset]
    if dataset.count("/") == 1 and not Path(dataset).exists():
        return dataset
    return None


def versions() -> dict[str, str]:
    """The versions of the libraries that made and serve the export (those installed here)."""
    found = {"python": platform.python_version()}
    for name in VERSIONED:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


def papers(spec: dict[str, Any], recipe: dict[str, Any]) -> list[str]:
    """The BibTeX keys of ``BIBTEX`` behind this run: the semi-Siamese paper always (ssft's architectures and
    lightweight fine-tuning methods); DAFT for a run with its callback; TCT-ColBERT, EmbedDistill and query-encoder
    distillation for the distillation they describe."""
    keys = ["semi_siamese"]
    text = repr(recipe).lower()
    loss = recipe.get("loss") if isinstance(recipe.get("loss"), (dict, str)) else {}
    loss_name = loss if isinstance(loss, str) else str(loss.get("name", ""))
    distillation = recipe.get("distillation") if isinstance(recipe.get("distillation"), dict) else None
    if "daft" in text:
        keys.append("daft")
    if loss_name.startswith("tct") or spec.get("architecture") == "colbert" and "tct" in text:
        keys.append("tct_colbert")
    if distillation is not None:
        keys.append("query_distillation" if distillation.get("query_only") else "embeddistill")
    return list(dict.fromkeys(keys))


def _numbers(metrics: dict[str, Any]) -> tuple[dict[str, dict[str, float]], list[str]]:
    """The metrics that are numbers ({row: {measure: value}}) and the names of what is not (a hand-edited file)."""
    kept: dict[str, dict[str, float]] = {}
    skipped = []
    for row, values in metrics.items():
        if not isinstance(values, dict):
            skipped.append(str(row))
            continue
        for measure, value in values.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                kept.setdefault(str(row), {})[str(measure)] = float(value)
            else:
                skipped.append(f"{row}.{measure}")
    return kept, skipped


def row_roles(rows: list[str], split: str, info: dict[str, Any]) -> dict[str, str]:
    """What each metrics.json row is: this model (the split's own row), the first stage, the interpolation with it
    (``<split>+<first stage>``), the dense-sparse fusion, the starting model; the words the card's table uses."""
    first = info.get("first_stage")
    alpha = info.get("interpolation_alpha")
    roles = {}
    for row in rows:
        if row == split:
            roles[row] = "this model"
        elif row == "start":
            roles[row] = "the starting model, before training (reference)"
        elif row.startswith(split + "+") and row.endswith(".fusion"):
            roles[row] = "this model fused with the first stage (dense-sparse fusion; reference)"
        elif row.startswith(split + "+"):
            weight = f", weight {rounded(alpha):g} tuned on validation" if isinstance(alpha, (int, float)) else ""
            roles[row] = f"this model interpolated with the first stage{weight} (reference)"
        elif row == first or first is None:
            roles[row] = "first stage (reference)"
        else:
            roles[row] = "reference"
    return roles


def _hyper_parameters(recipe: dict[str, Any]) -> list[tuple[str, Any]]:
    """The recipe keys a reader needs to reproduce or judge the training, as (dotted key, value), those present."""
    wanted = ["model.name", "model.architecture", "model.head", "model.max_length", "adapter.method", "adapter.r",
              "adapter.alpha", "adapter.dropout", "loss", "loss.name", "data.dataset", "data.train_split",
              "data.validation_split", "data.holdout_queries", "data.test_split", "data.max_train_queries",
              "data.max_documents", "data.negatives",
              "data.num_negatives", "training.num_train_epochs", "training.max_steps",
              "training.per_device_train_batch_size", "training.learning_rate", "model.head_learning_rate",
              "training.warmup_steps", "training.weight_decay", "eval.first_stage", "eval.depth",
              "eval.selection_metric", "seed"]
    found = []
    for key in wanted:
        node: Any = recipe
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if node is not None and not isinstance(node, dict):
            found.append((key, node))
    return found


def model_card(spec: dict[str, Any], info: dict[str, Any], recipe: dict[str, Any], metrics: dict[str, Any],
               repo_id: str | None, run_info: dict[str, Any] | None = None,
               served_precision: str = "fp32") -> tuple[ModelCard, list[str]]:
    """The export's card and the metrics.json entries left out because they are not numbers (for a warning).
    ``spec``: the saved ranker's spec; ``info``: the export's {format, library, loader, notes}; ``recipe``,
    ``metrics``, ``run_info``: the run folder's files ({} for a bare model folder); ``repo_id``: the hub repository
    it is pushed to (None: a local export); ``served_precision``: the dtype of the exported weights."""
    run_info = run_info or {}
    data = recipe.get("data") if isinstance(recipe.get("data"), dict) else {}
    dataset = data.get("dataset") if isinstance(data.get("dataset"), str) else None
    split = run_info.get("split") or data.get("test_split") or "test"
    split = split if isinstance(split, str) else "test"
    hub_dataset = dataset_hub_id(dataset)
    architecture, method = spec["architecture"], spec["method"]
    name = repo_id or f"ssft-{architecture}-{method}"
    numbers, skipped = _numbers(metrics)
    own = numbers.get(split, {})
    scored_in = (run_info.get("scoring") or {}).get("precision") or run_info.get("precision")
    where = f"{dataset}, {split} split" if dataset else f"the {split} split"
    task = (f"reranking the {run_info['first_stage']} top-{run_info['depth']}"
            if run_info.get("first_stage") and run_info.get("depth") and "retrieval" not in run_info else "retrieval")
    results = [EvalResult(task_type="text-ranking", task_name=f"Text ranking ({task})",
                          dataset_type=hub_dataset or (dataset or "unknown"), dataset_name=hub_dataset or dataset or "unknown",
                          dataset_split=split, metric_type=measure, metric_value=rounded(value),
                          metric_name=measure + (f" ({scored_in})" if scored_in else ""), verified=False)
               for measure, value in own.items()]
    base = spec.get("base_model")
    base_id = base if base and not Path(str(base)).exists() else None
    card_data = ModelCardData(
        library_name=info["library"], base_model=base_id, tags=[*TAGS, method, architecture, info["format"]],
        datasets=[hub_dataset] if hub_dataset else None, model_name=name, eval_results=results or None,
        pipeline_tag="text-ranking")

    path = repo_id or PLACEHOLDER
    untouched = run_info.get("weights_changed") is False or bool(run_info.get("start_selected"))
    lines = [f"# {name}", "",
             (f"A {architecture} ranker: `{base or 'its base model'}` as it was, not fine-tuned (its ssft training run "
              f"with method `{method}`" + (f" on {dataset}" if dataset else "") + " handed back the starting weights)"
              if untouched else
              f"A {architecture} ranker fine-tuned with ssft (method `{method}`) from `{base or 'its base model'}`"
              + (f" on {dataset}" if dataset else ""))
             + f", exported by `ssft-export` as a {info['format']} model that sentence-transformers' `{info['loader']}` "
             f"loads.", "", "## Load it", "", "```python", USAGE[info["loader"]].format(path=path), "```", ""]
    if repo_id is None:
        lines += [f"`{PLACEHOLDER}` is a placeholder: replace it with the folder this card is in, or with the hub "
                  "repository id once you upload the folder.", ""]
    if info.get("notes"):
        lines += ["## What the export keeps", ""] + [f"- {n}" for n in info["notes"]] + [""]
    if numbers:
        roles = row_roles(list(numbers), split, run_info)
        measures = list(dict.fromkeys(m for values in numbers.values() for m in values))
        lines += [f"## Results of the training run ({where})", ""]
        if run_info.get("queries"):
            lines += [f"{task[0].upper()}{task[1:]}: {run_info['queries']} queries had candidates (a judged query "
                      f"without any scores 0 in every average). Only the row `{split}` is this model's own result (the "
                      "`model-index` metadata holds it alone); the other rows are reference points.", ""]
        else:
            lines += [f"Only the row `{split}` is this model's own result (the `model-index` metadata holds it alone); "
                      "the other rows are reference points.", ""]
        lines += ["| run | what | " + " | ".join(measures) + " |", "|---|---|" + "---|" * len(measures)]
        for row, values in numbers.items():
            lines.append(f"| {row} | {roles.get(row, 'reference')} | "
                         + " | ".join(f"{values[m]:.{DIGITS}f}" if m in values else "–" for m in measures) + " |")
        lines.append("")
    lines += _precision(scored_in, run_info, served_precision)
    lines += _training(recipe, run_info)
    lines += ["## Versions", "", "| library | the run | this export |", "|---|---|---|"]
    made_by = run_info.get("versions") or {}
    for library, version in versions().items():
        lines.append(f"| {library} | {made_by.get(library, 'not recorded')} | {version} |")
    lines += ["", "## Citation", "", "```bibtex", "\n\n".join(BIBTEX[k] for k in papers(spec, recipe)), "```", ""]
    card = ModelCard.from_template(card_data, template_str="---\n{{ card_data }}\n---\n\n" + "\n".join(lines) + "\n")
    return card, skipped


def _precision(scored_in: str | None, run_info: dict[str, Any], served: str) -> list[str]:
    lines = ["## Precision", ""]
    trained_in = run_info.get("training_precision")
    if scored_in:
        lines.append(f"ssft computed the results above in {scored_in} (`eval.precision`); the exported weights are "
                     f"{served}" + (f"; training ran in {trained_in}" if trained_in else "") + ".")
        if scored_in != served:
            lines.append(f"Served in {served}, its scores differ slightly from the {scored_in} scores behind the table "
                         "(the difference was not measured for this export) and near-ties can change order; "
                         f"`ssft-rerank` with `--precision {served}` on the run gives the table in {served}.")
    else:
        lines.append(f"The exported weights are {served}; the precision of the results was not recorded.")
    return lines + [""]


def _training(recipe: dict[str, Any], run_info: dict[str, Any]) -> list[str]:
    params = _hyper_parameters(recipe)
    if not params and not run_info:
        return []
    lines = ["## Training", ""]
    loss = recipe.get("loss")
    loss_name = loss if isinstance(loss, str) else (loss or {}).get("name") if isinstance(loss, dict) else None
    adapter = recipe.get("adapter") if isinstance(recipe.get("adapter"), dict) else {}
    if adapter.get("method") or loss_name:
        lines.append(f"Method `{adapter.get('method', '?')}`, loss `{loss_name or '?'}`.")
    if run_info.get("trainable_parameters") and run_info.get("total_parameters"):
        lines.append(f"Trainable parameters: {run_info['trainable_parameters']:,} of {run_info['total_parameters']:,}.")
    best = run_info.get("best_validation") or {}
    if isinstance(best.get("value"), (int, float)):
        lines.append(f"Selected epoch {best.get('epoch', 0):g} by validation {best.get('metric')} = "
                     f"{best['value']:.{DIGITS}f}" + (" (the starting weights: training never beat them)"
                                                       if run_info.get("start_selected") else "") + ".")
    if isinstance(run_info.get("train_seconds"), (int, float)):
        lines.append(f"Training took {run_info['train_seconds']:.0f} s.")
    if params:
        lines += ["", "| hyper-parameter | value |", "|---|---|"]
        lines += [f"| `{key}` | {_value(value)} |" for key, value in params]
    notes = run_info.get("notes") or []
    if notes:
        lines += ["", "What the run used:", ""] + [f"- {n}" for n in notes]
    return lines + [""]


def _value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.{DIGITS}g}"
    return str(value).replace("|", "\\|")


__all__ = ["BEIR_HUB_IDS", "BIBTEX", "PLACEHOLDER", "dataset_hub_id", "model_card", "papers", "rounded", "row_roles",
           "versions"]

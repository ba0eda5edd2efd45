"""Write a ranker in the formats other libraries load, without importing them (json + safetensors + transformers).

- ``cross`` → ``cross-encoder``: a transformers sequence-classification folder (``config.json`` with one label,
  weights, tokenizer) that ``AutoModelForSequenceClassification``, a ``text-classification`` pipeline and
  sentence-transformers' ``CrossEncoder`` load; its ``config_sentence_transformers.json`` names the identity
  activation, so ``CrossEncoder.predict`` returns ssft's score (the logit), not a sigmoid of it. ``head: classifier``
  is transformers' layout, exported exactly. ``head: cls_linear`` (a linear map of the raw [CLS] state) has no exact
  equivalent, since the sequence-classification pooler ends in tanh: it is exported through the pooler ε·I (ε = 1e-5)
  and the classifier w/ε, i.e. w · tanh(ε h)/ε + b = w · h + b − ε² Σ w_i h_i³ / 3 + ..., a difference below 1e-4 for
  hidden states |h_i| < 100 (stated in the model card; tested).
- ``twin`` (cosine / dot scorer) and ``dense`` → ``sentence-transformers``: Transformer → Pooling → Dense (the
  projection) → Normalize (``model.normalize``); query and document prompts as the model's. A model whose towers
  differ (a separate document tower, semi-Siamese LoRA merged into two encoders, inherited documents) is a ``Router``
  with ``query`` and ``document`` routes (``encode_query`` / ``encode_document``). The dense model's ``score_scale``
  is a constant factor of the similarity (ranking unchanged); the card says so.
- ``colbert`` → ``multi-vector``: a sentence-transformers ``MultiVectorEncoder`` folder: the markers as prompts (their
  tokens registered as special tokens, so they stay one piece; none where the model has none), queries expanded with
  [MASK] to ``query_max_length`` (or not, as the model: ``query_expansion``), the punctuation skiplist on documents,
  the projection (a token-level Dense without bias) and the token-level Normalize.

LoRA / LoRA++ are merged into the weights first (PEFT ``merge_and_unload``); semi-Siamese LoRA is merged twice, once
per tower (the shared adapter plus that tower's). What a standard forward cannot express is refused
(``export_refusal``): prompt / prefix tuning (PEFT's and 001's hidden prefix), hybrids (they contain one), TwinBERT's
learned combiner scorer.
"""
from __future__ import annotations

import copy
import json
import string
from pathlib import Path
from typing import Any

import torch
import transformers
from safetensors.torch import save_file
from tokenizers import AddedToken
from torch import nn
from transformers import AutoConfig, AutoModelForSequenceClassification

from ssft.adapters.semi_siamese import LORA_ADAPTER
from ssft.config.registry import ADAPTERS
from ssft.core.errors import SsftError
from ssft.models.interop.checkpoint import CLS_LINEAR_EPSILON, cls_linear_pooler

FORMATS = ("cross-encoder", "sentence-transformers", "multi-vector")
# model_type → (encoder prefix, pooler dense, final linear) of its *ForSequenceClassification (dense + tanh + linear)
SEQUENCE_CLASSIFICATION_LAYOUT = {
    "bert": ("bert", "bert.pooler.dense", "classifier"),
    "roberta": ("roberta", "classifier.dense", "classifier.out_proj"),
    "xlm-roberta": ("roberta", "classifier.dense", "classifier.out_proj"),
    "mpnet": ("mpnet", "classifier.dense", "classifier.out_proj"),
}
SERVED_BY = "ssft-rerank / ssft-retrieve serve it from the run folder"
IDENTITY = "torch.nn.modules.linear.Identity"


def unexportable_method(ranker) -> str | None:
    """The name of ``ranker``'s method when a plain transformer forward cannot hold it (prompt / prefix states: no
    standard export, no OpenVINO graph), else None."""
    method = ranker.backbone.method
    adapter = ADAPTERS.get(method) if method in ADAPTERS else None
    return method if adapter is None or not adapter.exportable else None


def export_refusal(ranker) -> str | None:
    """Why ``ranker`` cannot be written in a standard format (one line), or None when it can."""
    method = unexportable_method(ranker)
    if method is not None:
        return (f"method '{method}' cannot be exported: a standard forward has no place for its prompt / prefix states "
                f"(PEFT prompt / prefix, 001's hidden prefix, hybrids); {SERVED_BY}")
    if ranker.architecture not in FORMAT_OF:
        return f"architecture '{ranker.architecture}' has no export format; {SERVED_BY}"
    return ranker.export_refusal()


FORMAT_OF = {"cross": "cross-encoder", "twin": "sentence-transformers", "dense": "sentence-transformers",
             "colbert": "multi-vector"}


def export_format(ranker, requested: str = "auto") -> str:
    """The format ``ranker`` is written in: its architecture's (``auto``), or ``requested`` when that is it."""
    refusal = export_refusal(ranker)
    if refusal is not None:
        raise SsftError(refusal)
    own = FORMAT_OF[ranker.architecture]
    if requested not in ("auto", own):
        raise SsftError(f"--format {requested}: a '{ranker.architecture}' model is exported as {own}")
    return own


# ---------------------------------------------------------------- merged encoders


def merged_encoder(backbone, tower: str | None = None) -> nn.Module:
    """A plain transformers encoder equal to ``backbone`` (for ``tower`` of a semi-Siamese one): LoRA merged into a
    copy of the weights; the backbone itself is left as it was."""
    model = copy.deepcopy(backbone.model)
    if not backbone.is_peft:
        return model.eval()
    names = list(model.peft_config)
    if backbone.tower_switch is not None:
        if tower not in LORA_ADAPTER:
            raise SsftError("a semi-Siamese backbone is merged once per tower (query / document)")
        names = [n for n in names if n == "shared"] + [LORA_ADAPTER[tower]]
    return model.merge_and_unload(adapter_names=names).eval()


def tower_encoders(ranker) -> dict[str, tuple[nn.Module, Any, Any]]:
    """{"shared": (encoder, tokenizer, owner)} when queries and documents go through one encoder, else {"query": ...,
    "document": ...}; ``owner`` is the ranker whose settings (pooling, projection, normalize) apply to that tower."""
    backbone = ranker.backbone
    teacher = getattr(ranker, "document_teacher", None)
    separate = getattr(ranker, "document_backbone", None)
    if backbone.tower_switch is None and separate is None and teacher is None:
        return {"shared": (merged_encoder(backbone), ranker.tokenizer, ranker)}
    query = (merged_encoder(backbone, "query" if backbone.tower_switch else None), ranker.tokenizer, ranker)
    if teacher is not None:
        source = teacher.model
        document = tower_encoders(source)
        document = document.get("shared", document.get("document"))
    elif separate is not None:
        document = (merged_encoder(separate), ranker.document_tokenizer, ranker)
    else:
        document = (merged_encoder(backbone, "document"), ranker.tokenizer, ranker)
    return {"query": query, "document": document}


# ---------------------------------------------------------------- small writers


def _write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def _versions() -> dict[str, str]:
    return {"pytorch": torch.__version__, "transformers": transformers.__version__}


def _with_max_length(tokenizer, length: int):
    """A copy of ``tokenizer`` that truncates at ``length`` by default (what ssft's model was trained and scores with)."""
    tokenizer = copy.deepcopy(tokenizer)
    tokenizer.model_max_length = int(length)
    return tokenizer


def _save_encoder(encoder: nn.Module, tokenizer, folder: Path, sentence_config: dict[str, Any]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    encoder.save_pretrained(folder)  # safetensors: the default
    lengths = [v for k, v in sentence_config.items() if k.endswith("_length")]
    _with_max_length(tokenizer, max(lengths)).save_pretrained(folder)
    _write_json(folder / "sentence_bert_config.json", {
        "transformer_task": "feature-extraction",
        "modality_config": {"text": {"method": "forward", "method_output_name": "last_hidden_state"}},
        "module_output_name": "token_embeddings", **sentence_config})


def _save_dense(folder: Path, weight: torch.Tensor, bias: torch.Tensor | None, token_level: bool) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    name = "token_embeddings" if token_level else "sentence_embedding"
    _write_json(folder / "config.json", {"in_features": int(weight.shape[1]), "out_features": int(weight.shape[0]),
                                         "bias": bias is not None, "activation_function": IDENTITY,
                                         "module_input_name": name, "module_output_name": name})
    state = {"linear.weight": weight.detach().float().contiguous()}
    if bias is not None:
        state["linear.bias"] = bias.detach().float().contiguous()
    save_file(state, folder / "model.safetensors")


def _module(idx: int, path: str, kind: str) -> dict[str, Any]:
    return {"idx": idx, "name": str(idx), "path": path, "type": kind}


TRANSFORMER = "sentence_transformers.base.modules.transformer.Transformer"
POOLING = "sentence_transformers.sentence_transformer.modules.pooling.Pooling"
DENSE = "sentence_transformers.base.modules.dense.Dense"
NORMALIZE = "sentence_transformers.base.modules.normalize.Normalize"
ROUTER = "sentence_transformers.base.modules.router.Router"
MULTI_VECTOR_MASK = "sentence_transformers.multi_vector_encoder.modules.multi_vector_mask.MultiVectorMask"


# ---------------------------------------------------------------- cross-encoder


def export_cross_encoder(ranker, folder: Path) -> dict[str, Any]:
    """A transformers sequence-classification folder (see the module docstring). Returns notes for the card."""
    encoder = merged_encoder(ranker.backbone)
    model_type = encoder.config.model_type
    if model_type not in SEQUENCE_CLASSIFICATION_LAYOUT:
        known = ", ".join(SEQUENCE_CLASSIFICATION_LAYOUT)
        raise SsftError(f"a '{model_type}' cross-encoder has no sequence-classification layout ssft can write: ssft's head "
                        f"is dense + tanh + linear on the first token, as transformers' {known} heads are (e.g. "
                        f"DistilBERT's has a ReLU); {SERVED_BY}")
    prefix, pooler_key, linear_key = SEQUENCE_CLASSIFICATION_LAYOUT[model_type]
    settings = {k: v for k, v in encoder.config.to_dict().items() if k not in ("id2label", "label2id", "num_labels")}
    config = AutoConfig.for_model(**settings, num_labels=1)
    config.id2label, config.label2id = {0: "relevance"}, {"relevance": 0}
    model = AutoModelForSequenceClassification.from_config(config)
    hidden = encoder.config.hidden_size
    if ranker.pooler is not None:
        pooler_w, pooler_b = ranker.pooler.weight, ranker.pooler.bias
        linear_w, linear_b = ranker.head.weight, ranker.head.bias
        note = "head classifier (pooler + linear): exported exactly"
    else:
        eps = CLS_LINEAR_EPSILON
        pooler_w, pooler_b = cls_linear_pooler(hidden), torch.zeros(hidden)
        linear_w, linear_b = ranker.head.weight / eps, ranker.head.bias
        note = (f"head cls_linear (linear on the raw [CLS] state) exported as pooler {eps:g}·I + classifier w/{eps:g}: "
                f"tanh({eps:g}·h)/{eps:g} = h - {eps:g}²·h³/3 + ..., scores within 1e-4 of ssft's for |h| < 100")
    state = {f"{prefix}.{k}": v for k, v in encoder.state_dict().items()}
    state.update({f"{pooler_key}.weight": pooler_w, f"{pooler_key}.bias": pooler_b,
                  f"{linear_key}.weight": linear_w, f"{linear_key}.bias": linear_b})
    missing, unexpected = model.load_state_dict({k: v.detach().clone() for k, v in state.items()}, strict=False)
    missing = [k for k in missing if not k.endswith(("position_ids", "token_type_ids"))]
    if missing or unexpected:
        raise SsftError(f"cross-encoder export: the {type(model).__name__} does not match the encoder (missing {missing[:3]}, "
                        f"unexpected {unexpected[:3]})")
    model.eval().save_pretrained(folder)  # safetensors: the default
    _with_max_length(ranker.tokenizer, ranker.spec["max_length"]).save_pretrained(folder)
    _write_json(folder / "modules.json", [_module(0, "", TRANSFORMER)])
    _write_json(folder / "sentence_bert_config.json", {
        "transformer_task": "sequence-classification",
        "modality_config": {"text": {"method": "forward", "method_output_name": "logits"}}, "module_output_name": "scores"})
    _write_json(folder / "config_sentence_transformers.json", {
        "__version__": _versions(), "activation_fn": IDENTITY, "default_prompt_name": None, "model_type": "CrossEncoder",
        "prompts": {}})
    return {"library": "sentence-transformers", "loader": "CrossEncoder", "notes": [note]}


# ---------------------------------------------------------------- sentence-transformers


def _dense_route(owner, encoder, tokenizer, tower: str, folder: Path, base_idx: str) -> list[tuple[str, str]]:
    """Write one route's modules into ``folder`` (names ``{base_idx}{i}_{Kind}``); returns [(name, type)]."""
    spec = owner.spec
    hidden = encoder.config.hidden_size
    length = spec["query_max_length"] if tower == "query" else spec["max_length"]
    names: list[tuple[str, str]] = []

    def name(kind: str) -> str:
        return f"{base_idx}{len(names)}_{kind}"

    transformer = name("Transformer")
    _save_encoder(encoder, tokenizer, folder / transformer, {"query_length": length} if tower == "query"
                  else {"document_length": length} if tower == "document" else
                  {"query_length": spec["query_max_length"], "document_length": spec["max_length"]})
    names.append((transformer, TRANSFORMER))
    pooling = name("Pooling")
    _write_json(folder / pooling / "config.json", {"embedding_dimension": hidden, "pooling_mode": spec.get("pooling", "mean"),
                                                   "include_prompt": True})
    names.append((pooling, POOLING))
    projection = getattr(owner, "projection", None)
    if projection is not None:
        dense = name("Dense")
        # a narrower tower is zero-padded into the shared projection: its columns beyond its hidden size act on zeros
        _save_dense(folder / dense, projection.weight[:, :hidden], projection.bias, token_level=False)
        names.append((dense, DENSE))
    if getattr(owner, "normalize", False):
        normalize = name("Normalize")
        _write_json(folder / normalize / "config.json", {"module_input_name": "sentence_embedding",
                                                         "module_output_name": "sentence_embedding"})
        names.append((normalize, NORMALIZE))
    return names


def export_sentence_transformer(ranker, folder: Path) -> dict[str, Any]:
    """A SentenceTransformer folder (one encoder) or one with a Router (query / document routes)."""
    towers = tower_encoders(ranker)
    if ranker.architecture == "twin":
        similarity = "cosine" if ranker.scorer == "cosine" else "dot"
    else:
        similarity = "cosine" if ranker.normalize else "dot"
    prompts = {t: ranker.spec[f"{t}_prompt"] for t in ("query", "document") if ranker.spec.get(f"{t}_prompt")}
    if "shared" in towers:
        encoder, tokenizer, owner = towers["shared"]
        names = _dense_route(owner, encoder, tokenizer, "shared", folder, "")
        # the Transformer of a plain SentenceTransformer sits at the folder's root
        root = folder / names[0][0]
        for item in root.iterdir():
            item.rename(folder / item.name)
        root.rmdir()
        modules = [_module(0, "", TRANSFORMER)] + [_module(i, n, t) for i, (n, t) in enumerate(names[1:], start=1)]
    else:
        structure, types = {}, {}
        for tower in ("query", "document"):
            encoder, tokenizer, owner = towers[tower]
            route = _dense_route(owner, encoder, tokenizer, tower, folder, f"{tower}_")
            structure[tower] = [n for n, _ in route]
            types.update(dict(route))
        _write_json(folder / "router_config.json", {
            "types": types, "structure": structure,
            "parameters": {"default_route": "document", "allow_empty_key": True, "route_mappings": {}}})
        modules = [_module(0, "", ROUTER)]
    _write_json(folder / "modules.json", modules)
    _write_json(folder / "config_sentence_transformers.json", {
        "__version__": _versions(), "default_prompt_name": None, "model_type": "SentenceTransformer", "prompts": prompts,
        "similarity_fn_name": similarity})
    notes = []
    scale = getattr(ranker, "score_scale", 1.0)
    if scale != 1.0:
        notes.append(f"ssft's score is {scale:g} x the {similarity} similarity (the same ranking)")
    if "shared" not in towers:
        notes.append("query and document towers differ: a Router with 'query' and 'document' routes "
                     "(use encode_query / encode_document)")
    return {"library": "sentence-transformers", "loader": "SentenceTransformer", "notes": notes, "similarity": similarity}


# ---------------------------------------------------------------- multi-vector (ColBERT)


def _marked_tokenizer(tokenizer, markers: list[str]):
    """A copy of ``tokenizer`` where the markers are special tokens (one piece each when prepended as text)."""
    tokenizer = copy.deepcopy(tokenizer)
    added = set(getattr(tokenizer, "added_tokens_encoder", {}) or {})
    new = [AddedToken(m, normalized=False, special=True) for m in markers
           if m not in added or tokenizer.tokenize(m) != [m]]
    if new:
        tokenizer.add_special_tokens({"additional_special_tokens": new}, replace_extra_special_tokens=False)
    for marker in markers:
        if tokenizer.tokenize(f"{marker} text")[:1] != [marker]:
            raise SsftError(f"multi-vector export: the marker {marker} does not tokenise as one piece")
    return tokenizer


def export_multi_vector(ranker, folder: Path) -> dict[str, Any]:
    """A MultiVectorEncoder folder (see the module docstring); semi-Siamese towers are a Router."""
    towers = tower_encoders(ranker)
    query_marker, document_marker = ranker.query_marker, ranker.document_marker  # None: that tower is not marked
    markers = [m for m in (query_marker, document_marker) if m is not None]
    length = int(ranker.spec["query_max_length"])
    expansion = ({"strategy": "fixed", "attend": bool(ranker.attend_expansion), "token": None, "length": length}
                 if ranker.query_expansion else None)  # None: sentence-transformers' "expansion off"
    settings = {"query": {"query_length": length, "query_expansion": expansion},
                "document": {"document_length": int(ranker.spec["max_length"])}}
    weight = ranker.projection.weight
    idx = 0
    modules = []
    if "shared" in towers:
        encoder, tokenizer, _ = towers["shared"]
        _save_encoder(encoder, _marked_tokenizer(tokenizer, markers), folder, {**settings["query"], **settings["document"]})
        modules.append(_module(idx, "", TRANSFORMER))
        idx += 1
        _save_dense(folder / f"{idx}_Dense", weight, None, token_level=True)
        modules.append(_module(idx, f"{idx}_Dense", DENSE))
    else:
        structure, types = {}, {}
        for tower in ("query", "document"):
            encoder, tokenizer, _ = towers[tower]
            transformer, dense = f"{tower}_0_Transformer", f"{tower}_1_Dense"
            _save_encoder(encoder, _marked_tokenizer(tokenizer, markers), folder / transformer, settings[tower])
            _save_dense(folder / dense, weight, None, token_level=True)
            structure[tower] = [transformer, dense]
            types.update({transformer: TRANSFORMER, dense: DENSE})
        _write_json(folder / "router_config.json", {
            "types": types, "structure": structure,
            "parameters": {"default_route": "document", "allow_empty_key": True, "route_mappings": {}}})
        modules.append(_module(idx, "", ROUTER))
    idx += 1
    _write_json(folder / f"{idx}_MultiVectorMask" / "config.json", {
        "skiplist_words": list(string.punctuation) if ranker.mask_punctuation else [], "skiplist_tasks": ["document"],
        "keep_only_token_ids": None})
    modules.append(_module(idx, f"{idx}_MultiVectorMask", MULTI_VECTOR_MASK))
    idx += 1
    _write_json(folder / f"{idx}_Normalize" / "config.json", {"module_input_name": "token_embeddings",
                                                              "module_output_name": "token_embeddings"})
    modules.append(_module(idx, f"{idx}_Normalize", NORMALIZE))
    _write_json(folder / "modules.json", modules)
    _write_json(folder / "config_sentence_transformers.json", {
        "__version__": _versions(), "default_prompt_name": None, "model_type": "MultiVectorEncoder",
        "prompts": {tower: f"{marker} " for tower, marker in (("query", query_marker), ("document", document_marker))
                    if marker is not None}, "similarity_fn_name": "maxsim"})
    queries = f"[MASK]-expanded to {length} tokens" if expansion else f"cut at {length} tokens, not expanded"
    return {"library": "sentence-transformers", "loader": "MultiVectorEncoder",
            "notes": [f"queries: {query_marker or 'no'} marker, {queries}; documents: {document_marker or 'no'} marker, "
                      f"punctuation {'skipped' if ranker.mask_punctuation else 'kept'} in scoring; MaxSim"]}


WRITERS = {"cross-encoder": export_cross_encoder, "sentence-transformers": export_sentence_transformer,
           "multi-vector": export_multi_vector}


def export_model(ranker, folder: Path, requested: str = "auto") -> dict[str, Any]:
    """Write ``ranker`` into the empty folder ``folder`` in its format (``export_format``); returns what the model card
    needs ({format, library, loader, notes})."""
    fmt = export_format(ranker, requested)
    ranker.eval()
    with torch.no_grad():
        info = WRITERS[fmt](ranker, Path(folder))
    return {"format": fmt, **info}


__all__ = ["FORMATS", "FORMAT_OF", "SEQUENCE_CLASSIFICATION_LAYOUT", "export_format", "export_model",
           "export_refusal", "merged_encoder", "tower_encoders", "unexportable_method"]

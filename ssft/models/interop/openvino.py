"""The OpenVINO serving backend: a ranker's transformer run by OpenVINO's CPU runtime, everything after it (pooling,
heads, projections, scores) by ssft's own torch code, so every architecture and exportable method serves alike.

Why OpenVINO, called directly: on the CPUs ssft targets its runtime runs a MiniLM forward faster than PyTorch
(BENCHMARKS.md § vs_sentence_transformers_openvino) and its calibrated static int8 (NNCF) keeps rankings close to
float32 where PyTorch's dynamic int8 does not. ``openvino.convert_model`` converts the torch module itself, so no
exporter library is needed (optimum-intel and optimum-onnx pin transformers releases older than ssft's).

- ``serve_openvino(ranker, precision, calibration)``: every ``Backbone`` of the ranker (a separate document tower, the
  query and document towers of a semi-Siamese adapter merged one by one, an inherited document model) converted from
  its merged encoder (``ssft.models.interop.export.merged_encoder``: LoRA folded in) with dynamic batch and sequence
  dimensions, compiled for the CPU and attached as ``Backbone.serving``: every forward without gradient goes through
  it. Precision: ``fp32`` and ``bf16`` are OpenVINO's inference precision hints (f32 / bf16); ``int8`` is NNCF's
  static quantisation (``nncf.quantize``, transformer preset) calibrated on the very inputs the ranker builds from
  ``calibration`` (texts or (query, document) pairs of the corpus being served), offline; what is not quantised runs
  at the machine's native precision (bf16 where the CPU computes it natively, else f32): the softmax and layer norms,
  and, in the layers a ranker names in ``int8_float_attention_layers`` (a cross-encoder: every layer), attention's
  query and key projections (BENCHMARKS.md § int8_cross_distilled). A ranker that declares
  ``int8_checks_scores`` (a cross-encoder) then checks its own int8 scores against float on whole queries of the pairs
  served (``int8_check``) and serves at the machine's float precision where they moved beyond ``CHECK_LIMIT``, said
  in one line (pairs with no query of 3 or more are not checked, said in one line too). The runtime uses as many
  threads as torch does (``torch.get_num_threads``).
- ``write_openvino(folder)``: beside an ``ssft-export`` folder, the OpenVINO IR of each of its Transformer modules as
  sentence-transformers' ``backend="openvino"`` reads it (``<module>/openvino/openvino_model.xml``: the
  feature-extraction graph with the output ``last_hidden_state``, or the sequence-classification graph with
  ``logits`` for a cross-encoder), weights kept float32.
- ``serve``: what every serving path (ssft-rerank, ssft-encode, ssft-retrieve, ssft-eval, ssft-latency,
  ``ssft.load``) runs once its model is loaded: the backend resolved (``resolve_backend``) and the ranker switched to
  it at its precision. ``auto`` (the serving commands' default) is OpenVINO where it is installed, the model is on the
  CPU, its method converts and the job has at least ``AUTO_MIN_INPUTS_PER_THREAD`` inputs per torch thread (a
  conversion costs about 2 s for a MiniLM and OpenVINO bf16 saves 5 to 7 ms per input and thread against torch bf16,
  encoding / reranking: it pays from about 300 to 400 inputs a thread), else torch. int8 is OpenVINO's calibrated
  static int8 whatever ``auto`` says: torch's dynamic int8 moved nDCG@10 by up to 0.017 and ran no faster than bf16
  (BENCHMARKS.md § openvino_quality), so a serving path refuses it; it remains only where OpenVINO cannot go, a
  training run's validation (``eval.precision: int8`` while the weights change at every evaluation).
- ``unserve``: the ranker back on torch (a training run's start, scored on OpenVINO before training begins).

``openvino`` and ``nncf`` are an optional extra (``pip install ssft[openvino]``): imported only here, lazily.
"""
from __future__ import annotations

import copy
import hashlib
import importlib.util
import json
import logging
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch import nn
from transformers import AutoModel, AutoModelForSequenceClassification

from ssft.adapters.backbone import Backbone
from ssft.adapters.cpu_kernels import remove_cpu_kernels
from ssft.core import arguments
from ssft.core import precision as precisions
from ssft.core.errors import SsftError
from ssft.core.hub import read_json_file
from ssft.models.interop.export import merged_encoder, unexportable_method
from ssft.models.interop.first_token import first_token_last_layer

logger = logging.getLogger("ssft")
BACKENDS = precisions.BACKENDS
DEFAULT_BACKEND = "auto"  # the serving commands' default (module docstring); ssft.load and eval.backend: torch
AUTO_MIN_INPUTS_PER_THREAD = 500  # auto converts from this many inputs per torch thread (module docstring)
SUBFOLDER = "openvino"  # sentence-transformers' backend="openvino" layout: <Transformer folder>/openvino/...
IR_FILE = "openvino_model.xml"
# texts / pairs drawn for int8 calibration (NNCF's default subset is 300 inputs). Chosen on dev data: 1,000 pairs
# cut a reranker's int8 score error by 14% against 400 on out-of-domain queries, on every one of four samples, and
# drawing all 2,000 cut it no further (BENCHMARKS.md § int8_cross_distilled); calibrating costs about 2.4x as long.
CALIBRATION_SIZE = 1000
CALIBRATION_BATCH = 8
# int8's check of its own scores (a ranker that declares ``Ranker.int8_checks_scores``, ``int8_check``): whole
# queries' pairs drawn (seeded) from those served, the first CHECK_PAIRS_PER_QUERY of each in the order served (a first
# stage's top), until CHECK_PAIRS; scored in float and at int8. Where int8's mean |score error| over the spread of the
# query's float scores exceeds CHECK_LIMIT, the ranker serves at the machine's float precision instead. Chosen on dev
# data (BENCHMARKS.md § int8_check).
CHECK_PAIRS = 300
CHECK_PAIRS_PER_QUERY = 20
CHECK_LIMIT = 0.2
INSTALL = "pip install 'ssft[openvino]' (openvino and nncf)"
HINTS = {"fp32": "f32", "bf16": "bf16"}


def available() -> bool:
    """True where the ``openvino`` package can be imported."""
    return importlib.util.find_spec("openvino") is not None


def _openvino():
    try:
        import openvino  # noqa: PLC0415 -- optional extra, imported only by the OpenVINO backend
    except ImportError:
        raise SsftError(f"backend openvino: the openvino package is not installed; {INSTALL}") from None
    return openvino


check_backend = precisions.check_backend


def check_serving(backend: str, precision: str | None, where: str = "--backend") -> str:
    """``backend`` checked for a serving path before anything is loaded: one of ``BACKENDS``, and not torch with
    int8 (module docstring); a one-line error naming ``where`` otherwise."""
    check_backend(backend, where)
    if backend == "torch" and precision == "int8":
        raise SsftError(f"{where}: torch with precision int8: int8 runs on OpenVINO (its calibrated static int8; "
                        f"torch's dynamic int8 ranked worse and ran no faster than bf16); use openvino or bf16")
    return backend


def refusal(ranker) -> str | None:
    """Why ``ranker``'s transformer cannot run on OpenVINO (one line), or None."""
    if not isinstance(getattr(ranker, "backbone", None), Backbone):
        return f"a {type(ranker).__name__} has no ssft backbone to convert; serve it with backend torch"
    why = ranker.graph_refusal()
    if why is not None:
        return why
    method = unexportable_method(ranker)
    if method is not None:
        return (f"method '{method}' cannot run on OpenVINO: a plain transformer forward has no place for its prompt / "
                f"prefix states; serve it with backend torch")
    param = next(iter(ranker.parameters()), None)
    if param is not None and param.device.type != "cpu":
        return f"backend openvino runs on the CPU, the model is on {param.device.type}; use backend torch there"
    return None


def auto_min_inputs() -> int:
    """How many inputs a job needs before ``auto`` converts to OpenVINO (module docstring)."""
    return AUTO_MIN_INPUTS_PER_THREAD * max(1, int(torch.get_num_threads()))


def resolve_backend(backend: str, ranker, where: str = "--backend", inputs: int | None = None,
                    precision: str | None = None) -> str:
    """The backend a ranker serves on (module docstring): ``auto`` is openvino where it is installed, the ranker
    converts and ``inputs`` (the job's texts or pairs; None: unknown, taken as enough) reach ``auto_min_inputs``,
    else torch; int8 is openvino's only, and ``openvino`` asked for and impossible is a one-line error."""
    check_serving(backend, precision, where)
    why = refusal(ranker)
    if precision == "int8":
        if why is not None:  # the user asked for int8, not for a backend: name what they gave
            raise SsftError(f"{'--precision' if where.startswith('--') else 'precision'} int8: int8 serves on OpenVINO "
                            f"only, and {why.split(';')[0]}; serve it at fp32 or bf16 on torch")
        backend = "openvino"
    if backend == "torch":
        return "torch"
    if backend == "auto":
        big = inputs is None or inputs >= auto_min_inputs()
        return "openvino" if available() and why is None and big else "torch"
    if why is not None:
        raise SsftError(f"{where}: {why}")
    _openvino()
    return "openvino"


# ---------------------------------------------------------------- conversion


class Graph(nn.Module):
    """A transformer as a graph of tensors: (input_ids, attention_mask[, token_type_ids]) → its ``output``
    (``last_hidden_state`` of an encoder, ``logits`` of a sequence-classification model); ``first_token``: only the
    first token's state (batch, hidden), for a ranker that reads nothing else (``Ranker.serves_first_token_only``),
    and ``pooler`` (``Ranker.serving_pooler``) on it when given: OpenVINO runs such a graph ~3% faster than one ending
    at the last layer norm (BENCHMARKS.md § vs_sentence_transformers_openvino). Its last layer then computes the
    first token's row only where the encoder is BERT-style (``ssft.models.interop.first_token``): ``model`` is a copy
    that only serves (``merged_encoder``), changed in place."""

    def __init__(self, model: nn.Module, output: str = "last_hidden_state", first_token: bool = False,
                 pooler: nn.Module | None = None):
        super().__init__()
        self.model, self.output, self.segments = model, output, _uses_segments(model.config)
        self.first_token, self.pooler = first_token or pooler is not None, pooler
        # nothing past the first token leaves the graph: its last layer computes that row only (``first_token``)
        self.first_token_layer = self.first_token and first_token_last_layer(model)

    def forward(self, input_ids, attention_mask, token_type_ids=None):
        kwargs = {"input_ids": input_ids, "attention_mask": attention_mask}
        if self.segments:
            kwargs["token_type_ids"] = token_type_ids
        out = getattr(self.model(**kwargs), self.output)
        if not self.first_token:
            return out
        return self.pooler(out[:, 0]) if self.pooler is not None else out[:, 0]


def _uses_segments(config) -> bool:
    """The encoder takes token_type_ids (BERT-like: more than one segment embedding)."""
    return int(getattr(config, "type_vocab_size", 0) or 0) > 1


def convert(graph: Graph):
    """``openvino.convert_model`` of ``graph`` with dynamic batch and sequence dimensions; its output named as the
    graph's (what sentence-transformers' OpenVINO models read by name)."""
    ov = _openvino()
    segments, output = graph.segments, graph.output
    names = ["input_ids", "attention_mask"] + (["token_type_ids"] if segments else [])
    example = {name: torch.ones(2, 8, dtype=torch.long) for name in names}
    if segments:
        example["token_type_ids"][:, 4:] = 1
    example["attention_mask"][1, 6:] = 0
    graph = graph.eval()
    remove_cpu_kernels(graph)  # ssft's oneDNN forwards are for torch's eager runs; the plain ones trace
    from openvino.frontend.pytorch.ts_decoder import TorchScriptPythonDecoder  # noqa: PLC0415 -- optional extra
    with torch.no_grad():
        # traced without torch.jit's check (a second trace compared with the first: a third of the conversion time);
        # the converted graph is checked against torch's scores by the tests instead
        decoder = TorchScriptPythonDecoder(graph, example_input=example, trace_kwargs={"check_trace": False})
        model = ov.convert_model(decoder, example_input=example,
                                 input=[(name, ov.PartialShape([-1, -1]), ov.Type.i64) for name in names])
    model.outputs[0].get_tensor().set_names({output})
    return model


def compile_config(precision: str) -> dict[str, Any]:
    """OpenVINO's CPU configuration for serving at ``precision`` (fp32 / bf16 hints; int8: the machine's native
    float precision for what is not quantised), with torch's thread count."""
    hint = HINTS.get(precision) or ("bf16" if precisions.cpu_bf16_native() else "f32")
    return {"INFERENCE_PRECISION_HINT": hint, "INFERENCE_NUM_THREADS": int(torch.get_num_threads()),
            "PERFORMANCE_HINT": "LATENCY"}


def _compile(model, precision: str):
    """The model compiled for the CPU with ``compile_config(precision)``."""
    return _openvino().Core().compile_model(model, "CPU", compile_config(precision))


class OpenVINOEncoder:
    """A compiled encoder standing in for a ``Backbone``'s transformer (``Backbone.serving``): called as the
    backbone's forward is, it returns float32 hidden states (batch, tokens, hidden) as a torch tensor.
    ``compiled`` holds one compiled model per tower (``None``: every tower), ``segments`` whether it takes
    token_type_ids; ``first_token``: the graphs return the first token's state only (``pooled``: through the ranker's
    pooler, ``Backbone.serves_pooled``), handed back as (batch, 1, hidden).
    """

    def __init__(self, compiled: dict[str | None, Any], segments: bool, precision: str, first_token: bool = False,
                 pooled: bool = False):
        self.compiled, self.segments, self.precision = compiled, segments, precision
        self.first_token, self.pooled = first_token or pooled, pooled
        self.requests = {tower: model.create_infer_request() for tower, model in compiled.items()}

    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None,
                 tower: str | None) -> torch.Tensor:
        key = tower if tower in self.requests else None
        if key not in self.requests:
            raise SsftError(f"backend openvino: no converted encoder for tower {tower!r}")
        inputs = {"input_ids": input_ids.cpu().numpy(), "attention_mask": attention_mask.cpu().numpy()}
        if self.segments:
            inputs["token_type_ids"] = (token_type_ids.cpu().numpy() if token_type_ids is not None
                                        else np.zeros_like(inputs["input_ids"]))
        request = self.requests[key]
        request.infer(inputs)
        hidden = torch.from_numpy(np.array(request.get_output_tensor(0).data, dtype=np.float32))
        return hidden.unsqueeze(1) if self.first_token else hidden


class _Recorder:
    """Stands in for a backbone's transformer while the calibration texts go through the ranker: it keeps the
    inputs each tower receives (what int8 calibration needs: the ranker's own tokenisation, markers, expansion) and
    returns zeros, so nothing is computed."""

    def __init__(self, hidden: int, segments: bool):
        self.hidden, self.segments = hidden, segments
        self.inputs: dict[str | None, list[dict[str, np.ndarray]]] = {}

    def __call__(self, input_ids, attention_mask, token_type_ids, tower):
        item = {"input_ids": input_ids.cpu().numpy(), "attention_mask": attention_mask.cpu().numpy()}
        if self.segments:
            item["token_type_ids"] = (token_type_ids.cpu().numpy() if token_type_ids is not None
                                      else np.zeros_like(item["input_ids"]))
        self.inputs.setdefault(tower, []).append(item)
        return torch.zeros(*input_ids.shape, self.hidden)


def _rankers(ranker) -> list:
    """The ranker and the ranker of an inherited document model (not a submodule: ``document_teacher.model``)."""
    teacher = getattr(ranker, "document_teacher", None)
    return [ranker] + ([teacher.model] if teacher is not None and isinstance(getattr(teacher, "model", None), nn.Module)
                       else [])


def _backbones(ranker) -> list[Backbone]:
    seen, found = set(), []
    for owner in _rankers(ranker):
        for module in owner.modules():
            if isinstance(module, Backbone) and id(module) not in seen:
                seen.add(id(module))
                found.append(module)
    return found


def _feed(ranker, calibration: Sequence[str | tuple[str, str]]) -> None:
    """Run the calibration texts through ``ranker``'s inference interface (pairs scored; for a bi-encoder queries
    and documents encoded with their towers)."""
    pairs = [c for c in calibration if isinstance(c, (tuple, list))]
    texts = [c for c in calibration if isinstance(c, str)]
    if getattr(ranker, "bi_encoder", False):
        if pairs:
            ranker.encode_query([q for q, _ in pairs], batch_size=CALIBRATION_BATCH)
        documents = texts + [d for _, d in pairs]
        if documents:
            ranker.encode_document(documents, batch_size=CALIBRATION_BATCH)
        return
    if not pairs:
        raise SsftError(f"int8 calibration: a '{ranker.architecture}' model scores (query, document) pairs; give "
                        f"calibration pairs, not lone texts")
    ranker.predict(pairs, batch_size=CALIBRATION_BATCH)


def check_calibration(calibration: Any) -> list[str | tuple[str, str]]:
    """int8 calibration items as a list, each a text or a (query, document) pair of texts; anything else (a number,
    a 3-tuple, None, a text no tokenizer takes) is a one-line error naming the item: quantising on nothing would
    serve an unquantised model labelled int8."""
    if calibration is None or isinstance(calibration, (str, bytes)):
        raise SsftError("precision int8 on backend openvino: calibration needs texts or (query, document) pairs "
                        "of the corpus being served" + ("" if calibration is None else ", as a list"))
    items = list(calibration)
    if not items:
        raise SsftError("precision int8 on backend openvino: calibration needs texts or (query, document) pairs "
                        "of the corpus being served")
    for i, item in enumerate(items):
        if isinstance(item, str):
            arguments.text(item, f"calibration: item {i}")
        elif isinstance(item, (tuple, list)) and len(item) == 2:
            for part, what in zip(item, ("query", "document")):
                arguments.text(part, f"calibration: item {i}: {what}")
        else:
            raise SsftError(f"calibration: item {i}: expected a text or a (query, document) pair of texts, got "
                            f"{item!r}"[:300])
    return [item if isinstance(item, str) else (item[0], item[1]) for item in items]


def serving_copy(ranker):
    """A copy of ``ranker`` on torch at fp32 that a serving path may switch (precision, backend) while the caller's
    ranker stays as it was: its torch modules deep-copied, its converted OpenVINO encoders left behind (they are
    converted again from the weights when the copy is served)."""
    memo: dict[int, Any] = {id(b.serving): None for b in _backbones(ranker) if b.serving is not None}
    copied = copy.deepcopy(ranker, memo)
    unserve(copied)
    precisions.set_precision(copied, "fp32")
    for owner in _rankers(copied)[1:]:
        precisions.set_precision(owner, "fp32")
    return copied


def calibration_inputs(ranker, calibration: Sequence[str | tuple[str, str]]) -> dict[int, dict[str | None, list]]:
    """{id(backbone): {tower: [input dicts]}}: what each backbone's transformer receives when the ranker serves
    ``calibration`` (``_Recorder``)."""
    recorders = {}
    backbones = _backbones(ranker)
    for backbone in backbones:
        recorders[id(backbone)] = _Recorder(backbone.config.hidden_size, _uses_segments(backbone.config))
        backbone.serving = recorders[id(backbone)]
    try:
        _feed(ranker, calibration)
    finally:
        for backbone in backbones:
            backbone.serving = None
    return {key: recorder.inputs for key, recorder in recorders.items()}


def calibration_sample(items: list, size: int, seed: int = 0) -> list:
    """The int8 calibration items drawn from ``items``: all of them up to ``size``, else a seeded sample of ``size``."""
    return items if len(items) <= size else random.Random(seed).sample(items, size)


def check_groups(items: Sequence[str | tuple[str, str]], size: int = CHECK_PAIRS,
                 per_query: int = CHECK_PAIRS_PER_QUERY, seed: int = 0) -> list[list[tuple[str, str]]]:
    """What int8's check scores (``int8_check``): the pairs of ``items`` grouped by query, the first ``per_query`` of
    each in the order given, whole groups drawn (seeded) until ``size`` pairs; a query with fewer than 3 pairs has no
    spread to measure against and is left out (none left: nothing to check)."""
    by_query: dict[str, list[tuple[str, str]]] = {}
    for item in items:
        if isinstance(item, tuple):
            by_query.setdefault(item[0], []).append(item)
    groups = [pairs[:per_query] for pairs in by_query.values() if len(pairs) >= 3]
    random.Random(seed).shuffle(groups)
    chosen, total = [], 0
    for group in groups:
        if total >= size:
            break
        chosen.append(group)
        total += len(group)
    return chosen


def relative_score_error(reference: Sequence[float], scores: Sequence[float], sizes: Sequence[int]) -> float:
    """How far ``scores`` moved from ``reference`` where only each query's order counts: per query (``sizes``: the
    consecutive pairs of each), the mean |score - reference| over the standard deviation of its reference scores,
    averaged over the queries (a query whose reference scores are all equal is left out; none left: 0)."""
    reference, scores = np.asarray(reference, dtype=np.float64), np.asarray(scores, dtype=np.float64)
    errors, start = [], 0
    for size in sizes:
        ref, got = reference[start:start + size], scores[start:start + size]
        start += size
        if ref.std() > 0:
            errors.append(float(np.abs(got - ref).mean() / ref.std()))
    return float(np.mean(errors)) if errors else 0.0


def int8_check(ranker, groups: list[list[tuple[str, str]]], reference: np.ndarray) -> float:
    """``relative_score_error`` of ``ranker`` as served now against ``reference``, its float scores of ``groups``
    (``check_groups``)."""
    scores = ranker.predict([pair for group in groups for pair in group], batch_size=CALIBRATION_BATCH,
                            show_progress_bar=False)
    return relative_score_error(reference, scores, [len(group) for group in groups])


def corpus_calibration(queries: Sequence[str], documents: Sequence[str]) -> list:
    """int8 calibration items of a retrieval job: each query paired with a document (both towers see their inputs),
    then the remaining documents."""
    return list(zip(queries, documents)) + list(documents[len(queries):])


# what lies between a projection's MatMul and the attention op it feeds: bias, head split, scaling, casts
_TO_ATTENTION = frozenset({"Add", "Reshape", "Transpose", "Multiply", "Convert"})


def attention_score_projections(model, layers: Sequence[int] | Literal["all"] = "all") -> list[str]:
    """The friendly names of the MatMuls of an OpenVINO ``model`` whose outputs become attention's queries and keys:
    inputs 0 and 1 of each ``ScaledDotProductAttention`` node, followed back through the bias, the head split and any
    scaling (the projections of the values, input 2, are not among them). ``layers``: only those of these attention
    layers, in graph order (0 the first, -1 the last), or every layer's."""
    attentions = [op for op in model.get_ordered_ops() if op.get_type_name() == "ScaledDotProductAttention"]
    if layers != "all":
        chosen = {i % len(attentions) for i in layers if -len(attentions) <= i < len(attentions)}
        attentions = [op for i, op in enumerate(attentions) if i in chosen]
    names = []
    for op in attentions:
        for port in (0, 1):
            node = op.input_value(port).get_node()
            while node.get_type_name() in _TO_ATTENTION:
                node = node.input_value(0).get_node()
            if node.get_type_name() == "MatMul":
                names.append(node.get_friendly_name())
    return names


def quantize(model, inputs: list[dict[str, np.ndarray]],
             float_attention_layers: Sequence[int] | Literal["all"] = ()):
    """NNCF static int8 of an OpenVINO model, calibrated on ``inputs`` (offline; transformer preset: attention's
    softmax and the layer norms stay in float, SmoothQuant on). ``float_attention_layers``: the layers whose query
    and key projections (``attention_score_projections``) stay in float as well (``Ranker.int8_float_attention_layers``,
    or "all")."""
    try:
        import nncf  # noqa: PLC0415 -- optional extra, imported only for int8 on the OpenVINO backend
    except ImportError:
        raise SsftError(f"precision int8 on backend openvino: the nncf package is not installed; {INSTALL}") from None
    nncf.set_log_level(logging.ERROR)  # its progress bars and statistics lines, once per calibration
    kept = attention_score_projections(model, float_attention_layers) if float_attention_layers else []
    scope = {"ignored_scope": nncf.IgnoredScope(names=kept)} if kept else {}
    return nncf.quantize(model, nncf.Dataset(inputs), model_type=nncf.ModelType.TRANSFORMER, subset_size=len(inputs),
                         **scope)


def _float_attention_layers(ranker) -> dict[int, tuple[int, ...] | Literal["all"]]:
    """Per backbone (by id), the layers whose attention query and key projections int8 keeps in float
    (``Ranker.int8_float_attention_layers``; a backbone shared by several rankers: the layers any of them names)."""
    layers: dict[int, tuple[int, ...] | Literal["all"]] = {}
    for owner in _rankers(ranker):
        named = owner.int8_float_attention_layers
        for backbone in owner.modules():
            if isinstance(backbone, Backbone):
                kept = layers.get(id(backbone), ())
                layers[id(backbone)] = "all" if "all" in (named, kept) else tuple(sorted({*kept, *named}))
    return layers


def serve_openvino(ranker, precision: str = precisions.DEFAULT,
                   calibration: Sequence[str | tuple[str, str]] | None = None, seed: int = 0):
    """Serve ``ranker`` on OpenVINO at ``precision`` (module docstring), in place; returns it. ``calibration``:
    for int8, texts (a bi-encoder's documents) or (query, document) pairs of the corpus being served; at most
    ``CALIBRATION_SIZE`` of them are drawn (seeded). The ranker's torch modules stay float32 (they only pool and
    score); ``ranker.serving_backend`` records ``openvino:<precision>``."""
    why = refusal(ranker)
    if why is not None:
        raise SsftError(f"backend openvino: {why}")
    precision = precisions.resolve(precision, "cpu")
    precisions.set_precision(ranker, "fp32")
    for owner in _rankers(ranker)[1:]:
        precisions.set_precision(owner, "fp32")
    recorded: dict[int, dict[str | None, list]] = {}
    calibrated = None  # the calibration's fingerprint: what a cache or an index records of an int8 model
    checked: tuple[list[list[tuple[str, str]]], np.ndarray] | None = None
    if precision == "int8":
        items = check_calibration(calibration)
        checked = _float_reference(ranker, items, seed)
        items = calibration_sample(items, CALIBRATION_SIZE, seed)
        recorded = calibration_inputs(ranker, items)
        if not any(tower for inputs in recorded.values() for tower in inputs.values()):
            raise SsftError("int8 calibration: no calibration item reached the model; give texts or (query, document) "
                            "pairs of the corpus being served")
        calibrated = hashlib.sha256(json.dumps(items, ensure_ascii=False).encode("utf-8")).hexdigest()
    float_layers = _float_attention_layers(ranker)
    first_only = {id(b): owner.serving_pooler() for owner in _rankers(ranker)
                  if getattr(owner, "serves_first_token_only", False) for b in owner.modules() if isinstance(b, Backbone)}
    for backbone in _backbones(ranker):
        backbone.serving = None
        segments = _uses_segments(backbone.config)
        first_token = id(backbone) in first_only  # less leaves the runtime (Ranker.serves_first_token_only)
        pooler = first_only.get(id(backbone))  # and the ranker's pooler runs in the graph (Ranker.serving_pooler)
        towers = ("query", "document") if backbone.tower_switch is not None else (None,)
        compiled = {}
        for tower in towers:
            model = convert(Graph(merged_encoder(backbone, tower), first_token=first_token, pooler=pooler))
            inputs = recorded.get(id(backbone), {})
            tower_inputs = inputs.get(tower) if tower is not None else [i for items in inputs.values() for i in items]
            at = precision
            if precision == "int8":
                if tower_inputs:
                    model = quantize(model, tower_inputs, float_attention_layers=float_layers.get(id(backbone), ()))
                else:  # e.g. the query tower of a model that only encodes a corpus
                    at = "bf16" if precisions.cpu_bf16_native() else "fp32"
                    logger.info("int8: no calibration input reached the %s tower; it serves at %s", tower or "", at)
            compiled[tower] = _compile(model, at)
        backbone.serving = OpenVINOEncoder(compiled, segments, precision, first_token, pooled=pooler is not None)
    for owner in _rankers(ranker):
        object.__setattr__(owner, precisions.BACKEND_ATTRIBUTE, f"openvino:{precision}")
        if calibrated is not None:
            object.__setattr__(owner, precisions.CALIBRATION_ATTRIBUTE, calibrated)
        elif precisions.CALIBRATION_ATTRIBUTE in owner.__dict__:
            object.__delattr__(owner, precisions.CALIBRATION_ATTRIBUTE)
    return ranker if checked is None else _int8_or_float(ranker, *checked)


def _float_reference(ranker, items: list, seed: int) -> tuple[list[list[tuple[str, str]]], np.ndarray] | None:
    """What int8's check compares with (``int8_check``): the pairs it draws from ``items`` and their float scores,
    computed on torch before any backbone serves; None where ``ranker`` is not checked or nothing can be."""
    if not ranker.int8_checks_scores:
        return None
    groups = check_groups(items, seed=seed)
    if not groups:  # said, so that an unchecked int8 is never mistaken for a checked one
        logger.info("int8: no query among the pairs served has 3 pairs or more to measure its scores' spread; "
                    "its scores are not checked against float")
        return None
    scores = ranker.predict([pair for group in groups for pair in group], batch_size=CALIBRATION_BATCH,
                            show_progress_bar=False)
    return groups, np.asarray(scores)


def _int8_or_float(ranker, groups: list[list[tuple[str, str]]], reference: np.ndarray):
    """``ranker``, served at int8, kept so where ``int8_check`` is within ``CHECK_LIMIT``, else served at the
    machine's float precision instead, said in one line."""
    error = int8_check(ranker, groups, reference)
    if error <= CHECK_LIMIT:
        logger.info("int8: on %d queries of the pairs served, its scores moved %.3f of a query's spread from float "
                    "(within %.2f)", len(groups), error, CHECK_LIMIT)
        return ranker
    instead = "bf16" if precisions.cpu_bf16_native() else "fp32"
    logger.warning("int8: on %d queries of the pairs served, its scores moved %.3f of a query's spread from float "
                   "(it keeps within %.2f): this model serves at %s instead", len(groups), error, CHECK_LIMIT, instead)
    return serve_openvino(ranker, instead)


def unserve(ranker) -> None:
    """``ranker`` back on torch: its backbones' converted encoders dropped (the torch weights were never changed)."""
    for backbone in _backbones(ranker):
        backbone.serving = None
    for owner in _rankers(ranker):
        for attribute in (precisions.BACKEND_ATTRIBUTE, precisions.CALIBRATION_ATTRIBUTE):
            if attribute in owner.__dict__:
                object.__delattr__(owner, attribute)


def serve(ranker, backend: str, precision: str,
          calibration: Callable[[], Sequence[str | tuple[str, str]]] | Sequence[str | tuple[str, str]] | None = None,
          *, inputs: int | None = None, where: str = "--backend") -> tuple[Any, str, str]:
    """What every serving path runs once its model is loaded (module docstring): ``ranker`` switched for good to
    ``precision`` (auto resolved on its device) on ``backend`` (``resolve_backend``, ``inputs`` the job's size): torch's
    ``set_precision``, its inherited document model too, or ``serve_openvino``. ``calibration``: the texts or pairs
    of the corpus served, or a function giving them (called only for int8). Returns (the ranker, the backend it
    serves on, the precision its torch side computes in: what a ``prediction_trainer`` over it is given)."""
    param = next(iter(ranker.parameters()), None)
    precision = precisions.resolve(precision, param.device if param is not None else "cpu",
                                   "--precision" if where.startswith("--") else "precision")
    chosen = resolve_backend(backend, ranker, where, inputs, precision)
    if chosen == "openvino":
        items = None
        if precision == "int8" and calibration is not None:
            items = calibration() if callable(calibration) else calibration
        return serve_openvino(ranker, precision, items), chosen, "fp32"
    ranker = precisions.set_precision(ranker, precision)
    if getattr(ranker, "document_teacher", None) is not None:
        ranker.document_teacher.set_precision(precision)
    return ranker, chosen, precision


# ---------------------------------------------------------------- export beside a standard folder


def _transformer_folders(folder: Path) -> list[Path]:
    """The folders of an ssft-export's Transformer modules: the root, or each route's of a Router."""
    router = folder / "router_config.json"
    if router.is_file():
        config = read_json_file(router)
        types = config.get("types", {}) if isinstance(config, dict) else {}
        return [folder / name for name, kind in types.items() if str(kind).endswith(".Transformer")]
    return [folder]


def write_openvino(folder: Path) -> list[str]:
    """Write the OpenVINO IR of each Transformer module of the export in ``folder`` (module docstring); returns the
    files written, relative to ``folder``."""
    folder = Path(folder)
    written = []
    for module in _transformer_folders(folder):
        config = read_json_file(module / "sentence_bert_config.json") if (module / "sentence_bert_config.json").is_file() else {}
        task = config.get("transformer_task", "feature-extraction") if isinstance(config, dict) else "feature-extraction"
        if task == "sequence-classification":
            graph = Graph(AutoModelForSequenceClassification.from_pretrained(module, dtype=torch.float32), "logits")
        else:
            graph = Graph(AutoModel.from_pretrained(module, dtype=torch.float32))
        ir = convert(graph)
        target = module / SUBFOLDER / IR_FILE
        target.parent.mkdir(parents=True, exist_ok=True)
        _openvino().save_model(ir, str(target), compress_to_fp16=False)
        written += [str(target.relative_to(folder)), str(target.with_suffix(".bin").relative_to(folder))]
    return written


__all__ = ["AUTO_MIN_INPUTS_PER_THREAD", "BACKENDS", "CALIBRATION_SIZE", "DEFAULT_BACKEND", "Graph", "IR_FILE",
           "OpenVINOEncoder", "SUBFOLDER", "auto_min_inputs", "available", "calibration_inputs", "calibration_sample",
           "check_backend", "check_calibration", "check_groups", "check_serving", "compile_config", "convert",
           "corpus_calibration", "int8_check", "quantize", "refusal", "relative_score_error", "resolve_backend", "serve",
           "serve_openvino", "serving_copy", "unserve", "write_openvino"]

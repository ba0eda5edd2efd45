"""ssft against sentence-transformers on the same model, data, batch size and machine, in one run.

    pip install -e ".[bench]"
    python benchmarks/vs_sentence_transformers.py --out /work/bench-runs/scale [--repeats 3] [--threads 1]

Four tasks, each timed for ssft and for sentence-transformers (ST) in its own fresh worker process (so that each
side's peak RSS is its own), the two sides interleaved repeat by repeat (alternating which goes first), medians
over repeats, and the ratio ssft / ST of the medians:

- ``bi_train``: bi-encoder training, ssft dense dual encoder + contrastive loss (in-batch + one BM25 hard negative
  per query, 000 Eq. 5) vs ``SentenceTransformerTrainer`` + ``MultipleNegativesRankingLoss`` on (anchor, positive,
  negative) triplets — the same loss (scale 20 × cosine, in-batch + hard negatives). Queries / s.
- ``cross_train``: cross-encoder training, ssft ``cross`` + BCE vs ``CrossEncoderTrainer`` +
  ``BinaryCrossEntropyLoss`` on the same (query, document, label) pairs. Pairs / s.
- ``rerank``: ssft ``Trainer.predict`` (``RankingTrainer.score``) vs ``CrossEncoder.predict`` on BM25 top-k pairs.
  Pairs / s.
- ``encode``: ssft ``encode_corpus`` (dense dual encoder, mean pooling, L2-normalised) vs
  ``SentenceTransformer.encode`` (normalize_embeddings). Documents / s.

Four sides per task (issue 19): ``ssft`` with its defaults (inference at ``ssft.core.precision.DEFAULT`` resolved on
this machine; training as a recipe without ``training.bf16``, i.e. ``auto``: bf16 where the CPU computes it natively),
``ssft_fp32`` / ``ssft_bf16`` (the other precision), ``st`` (sentence-transformers' defaults: fp32), ``st_bf16``
(sentence-transformers under ``torch.autocast(cpu, bfloat16)`` for inference, and with ``bf16=True, use_cpu=True``
training arguments for training) and, for inference, ``st_bf16w`` (sentence-transformers loading the model with
bfloat16 weights, ``model_kwargs={"dtype": torch.bfloat16}``). ssft against ST under bf16 is the ratio to the faster
of ``st_bf16`` and ``st_bf16w`` (issue 19: "whichever is faster").

The parent process builds the data once (``data.json`` under ``--out``: NFCorpus train triplets with BM25 hard
negatives, test BM25 top-k pairs, corpus texts), so both sides read exactly the same texts. Training throughput
excludes the first optimizer step (warm-up); inference runs one warm-up batch first. Every worker runs with
``--threads`` torch threads (1 by default: fair on a shared machine, and ratios are what is reported).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import add_notes_option, add_section_options, with_notes, write_section  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MODEL = "sentence-transformers/all-MiniLM-L6-v2"
TASKS = ("bi_train", "cross_train", "rerank", "encode")
INFERENCE_TASKS = ("rerank", "encode")
UNITS = {"bi_train": "queries/s", "cross_train": "pairs/s", "rerank": "pairs/s", "encode": "docs/s"}


# ---------------------------------------------------------------------------------------------- data (parent)
def build_data(path: Path, args) -> dict:
    sys.path.insert(0, str(ROOT))
    from ssft.data.beir import load_dataset
    from ssft.firststage.bm25 import BM25

    dataset = load_dataset(args.dataset)
    rng = random.Random(0)
    bm25 = BM25(dataset)
    train = dataset.qrels("train")
    qids = sorted(q for q, rels in train.items() if any(r > 0 for r in rels.values()))
    rng.shuffle(qids)
    need_bi = args.batch_size * args.train_steps
    need_cross = args.cross_queries * args.train_steps
    qids = qids[: max(need_bi, need_cross)]
    run = bm25.search({q: dataset.queries[q] for q in qids}, 30)
    groups = []  # (query, positive, 3 hard negatives): one positive per query
    for q in qids:
        positives = sorted(d for d, r in train[q].items() if r > 0 and d in dataset.corpus)
        negatives = [d for d, _ in sorted(run.get(q, {}).items(), key=lambda kv: -kv[1]) if train[q].get(d, 0) <= 0]
        if not positives or len(negatives) < 3:
            continue
        groups.append({"query": dataset.queries[q], "positive": dataset.corpus[rng.choice(positives)].full_text,
                       "negatives": [dataset.corpus[d].full_text for d in negatives[:3]]})
    test = dataset.qrels("test")
    test_q = sorted(test)[: args.rerank_queries]
    test_run = bm25.search({q: dataset.queries[q] for q in test_q}, args.rerank_depth)
    rerank_run = {q: {d: float(score) for d, score in test_run[q].items()} for q in test_q if test_run.get(q)}
    pairs = [[dataset.queries[q], dataset.corpus[d].full_text]
             for q in sorted(rerank_run) for d, _ in sorted(rerank_run[q].items(), key=lambda kv: -kv[1])]
    corpus_ids = sorted(dataset.corpus)
    rng.shuffle(corpus_ids)
    corpus = [dataset.corpus[d].full_text for d in corpus_ids[: args.encode_docs]]
    data = {"groups": groups, "pairs": pairs, "rerank_run": rerank_run, "corpus": corpus}
    if args.real_data:
        data["accounting"] = token_accounting(pairs, corpus, args)
    path.write_text(json.dumps(data))
    return data


# ---------------------------------------------------------------------------------------------- token accounting
def flops_per_row(n: int, config: dict) -> float:
    """Multiply-add FLOPs (2 per multiply-add) of one row of ``n`` tokens through a BERT-style encoder: per layer,
    the Q, K, V and output projections (4 h²) and the feed-forward (2 h·I) for every token, and attention's QKᵀ and
    its weighted sum of V (2 n² h). Embeddings, LayerNorm, softmax and GELU are not matmuls and not counted."""
    h, inter, layers = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    return layers * (2 * n * (4 * h * h + 2 * h * inter) + 4 * n * n * h)


def character_batches(characters: list[int], batch_size: int) -> list[list[int]]:
    """The batches sentence-transformers cuts: inputs sorted by decreasing character count (its ``_input_length``,
    ``np.argsort`` as it calls it), every ``batch_size``."""
    import numpy as np

    order = [int(i) for i in np.argsort([-c for c in characters])]
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def batch_accounting(lengths: list[int], batches: list[list[int]], config: dict) -> dict:
    """Real tokens against the token positions the batches compute (each batch padded to its longest row), and
    the FLOPs of each: ``useful`` counts every row at its own length, ``computed`` at its batch's longest."""
    positions = sum(len(rows) * max(lengths[i] for i in rows) for rows in batches if rows)
    tokens = sum(lengths)
    return {"tokens": tokens, "positions": positions, "efficiency": tokens / positions,
            "useful_flops": sum(flops_per_row(n, config) for n in lengths),
            "computed_flops": sum(len(rows) * flops_per_row(max(lengths[i] for i in rows), config)
                                  for rows in batches if rows)}


def token_accounting(pairs: list, corpus: list[str], args) -> dict:
    """Per task, each library's batches over the timed inputs: sentence-transformers by characters (its tokenizer's
    row lengths), ssft by the exact token counts its rankers batch by (``length_batches``)."""
    from transformers import AutoConfig, AutoTokenizer

    from ssft.core.hub import resolve_model
    from ssft.models.batching import length_batches

    path = str(resolve_model(MODEL))
    config = AutoConfig.from_pretrained(path).to_dict()
    tokenizer = AutoTokenizer.from_pretrained(path)
    size, limit = args.eval_batch_size, args.rerank_max_length
    queries, documents = [q for q, _ in pairs], [d for _, d in pairs]
    st_pairs = [len(ids) for ids in tokenizer(queries, documents, truncation="longest_first", max_length=limit,
                                              verbose=False)["input_ids"]]
    st_docs = [len(ids) for ids in tokenizer(corpus, truncation=True, max_length=limit, verbose=False)["input_ids"]]
    cross, dense = ssft_model("cross", limit, 32), ssft_model("dense", limit, 32)
    ssft_pairs = cross.pair_token_lengths(queries, documents)
    ssft_docs = dense.token_lengths(corpus, "document")
    return {"rerank": {"st": batch_accounting(st_pairs, character_batches([len(q) + len(d) for q, d in pairs], size),
                                              config),
                       "ssft": batch_accounting(ssft_pairs, length_batches(ssft_pairs, size), config)},
            "encode": {"st": batch_accounting(st_docs, character_batches([len(d) for d in corpus], size), config),
                       "ssft": batch_accounting(ssft_docs, length_batches(ssft_docs, size), config)},
            "items": {"rerank": len(pairs), "encode": len(corpus)}}


def matmul_peak(threads: int) -> dict:
    """The best matmul throughput torch reaches here per CPU-second (GFLOP/s) in bf16 and fp32, over the shapes of a
    MiniLM layer's projections and feed-forward at 2,048 rows: the peak the useful FLOPs are set against."""
    import torch

    torch.set_num_threads(threads)
    peaks = {}
    for name, dtype in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
        best = 0.0
        for m, k, n in ((2048, 384, 1536), (2048, 1536, 384), (2048, 384, 384)):
            a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
            for _ in range(3):
                a @ b
            for _ in range(3):
                start = time.process_time()
                for _ in range(20):
                    a @ b
                best = max(best, 2 * m * k * n * 20 / (time.process_time() - start) / 1e9)
        peaks[name] = best
    return peaks


# ---------------------------------------------------------------------------------------------- workers
class StepClock:
    """A TrainerCallback recording the time at the end of every optimizer step."""

    def __new__(cls):
        from transformers import TrainerCallback

        class _Clock(TrainerCallback):
            def __init__(self):
                self.times: list[float] = []
                self.cpu: list[float] = []

            def on_step_end(self, args, state, control, **kwargs):
                self.times.append(time.perf_counter())
                self.cpu.append(time.process_time())

        return _Clock()


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _train_args(cls, out: Path, batch_size: int, steps: int, **extra):
    return cls(output_dir=str(out), per_device_train_batch_size=batch_size, max_steps=steps, learning_rate=2e-5,
               warmup_steps=0, weight_decay=0.0, report_to=[], save_strategy="no", logging_strategy="no",
               disable_tqdm=True, seed=42, dataloader_pin_memory=False, **extra)


def ssft_model(architecture: str, max_length: int, query_max_length: int):
    from ssft.config.recipe import ModelConfig
    from ssft.config.registry import MODELS

    cfg = ModelConfig(architecture=architecture, name=MODEL, max_length=max_length, query_max_length=query_max_length,
                      head_learning_rate=None)
    return MODELS.get(architecture).build(cfg, "full", {})


def worker(task: str, side: str, data: dict, a, scratch: Path) -> dict:
    import contextlib

    import torch

    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    if task == "peak":
        return {"task": task, "side": side, "peak_gflops": matmul_peak(a.threads)}
    side, _, variant = side.partition("_")  # ssft | st, and "" | fp32 | bf16
    if side == "ssft" and variant == "":  # ssft's default training precision: what training.bf16: auto resolves to
        from ssft.core import precision

        variant_training = "bf16" if precision.bf16_native("cpu") else "fp32"
    else:
        variant_training = variant or "fp32"
    train_bf16 = {"bf16": True, "use_cpu": True} if variant_training == "bf16" else {}
    st_autocast = (torch.autocast("cpu", dtype=torch.bfloat16) if variant == "bf16" else contextlib.nullcontext())
    st_kwargs = {"model_kwargs": {"dtype": torch.bfloat16}} if variant == "bf16w" else {}  # bf16 weights
    if side == "ssft":
        from ssft.core import precision

        ssft_precision = {"fp32": "fp32", "int8": "int8"}.get(variant, precision.DEFAULT)
        result_precision = precision.resolve(ssft_precision)
        if variant.startswith("ov"):  # OpenVINO at fp32 / bf16 hints or NNCF int8; the torch side stays fp32
            result_precision, ssft_precision = f"openvino:{variant[2:]}", "fp32"
    groups, pairs, corpus = data["groups"], data["pairs"], data["corpus"]
    result: dict = {"task": task, "side": side}
    if task == "bi_train":
        items = groups[: a.batch_size * a.train_steps]
        clock = StepClock()
        if side == "ssft":
            from transformers import TrainingArguments

            from ssft.data.examples import RankerCollator
            from ssft.losses import ContrastiveLoss
            from ssft.training.trainer import RankingTrainer

            model = ssft_model("dense", a.max_length, a.max_length)  # one length limit for both towers, as ST
            train = [{"query": g["query"], "documents": [g["positive"], g["negatives"][0]]} for g in items]
            trainer = RankingTrainer(model=model, args=_train_args(TrainingArguments, scratch, a.batch_size, a.train_steps,
                                                                   remove_unused_columns=False, **train_bf16),
                                     train_dataset=train, data_collator=RankerCollator(model), loss=ContrastiveLoss(),
                                     callbacks=[clock])
        else:
            from datasets import Dataset
            from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer
            from sentence_transformers.losses import MultipleNegativesRankingLoss
            from sentence_transformers.training_args import SentenceTransformerTrainingArguments

            from ssft.core.hub import resolve_model

            model = SentenceTransformer(str(resolve_model(MODEL)), device="cpu")
            model.max_seq_length = a.max_length
            train = Dataset.from_dict({"anchor": [g["query"] for g in items], "positive": [g["positive"] for g in items],
                                       "negative": [g["negatives"][0] for g in items]})
            trainer = SentenceTransformerTrainer(model=model, args=_train_args(SentenceTransformerTrainingArguments, scratch,
                                                                               a.batch_size, a.train_steps, **train_bf16),
                                                 train_dataset=train, loss=MultipleNegativesRankingLoss(model), callbacks=[clock])
        base = rss_mb()
        trainer.train()
        t = clock.times
        c = clock.cpu
        result.update(throughput=a.batch_size * (len(t) - 1) / (t[-1] - t[0]),
                      cpu_throughput=a.batch_size * (len(t) - 1) / (c[-1] - c[0]), steps=len(t))
    elif task == "cross_train":
        items = groups[: a.cross_queries * a.train_steps]
        pair_batch = a.cross_queries * 4
        clock = StepClock()
        if side == "ssft":
            from transformers import TrainingArguments

            from ssft.data.examples import RankerCollator
            from ssft.losses import PointwiseBCELoss
            from ssft.training.trainer import RankingTrainer

            model = ssft_model("cross", a.max_length, 32)
            train = [{"query": g["query"], "documents": [g["positive"], *g["negatives"]]} for g in items]
            trainer = RankingTrainer(model=model, args=_train_args(TrainingArguments, scratch, a.cross_queries, a.train_steps,
                                                                   remove_unused_columns=False, **train_bf16),
                                     train_dataset=train, data_collator=RankerCollator(model), loss=PointwiseBCELoss(),
                                     callbacks=[clock])
        else:
            from datasets import Dataset
            from sentence_transformers.cross_encoder import CrossEncoder, CrossEncoderTrainer
            from sentence_transformers.cross_encoder.losses import BinaryCrossEntropyLoss
            from sentence_transformers.cross_encoder.training_args import CrossEncoderTrainingArguments

            from ssft.core.hub import resolve_model

            model = CrossEncoder(str(resolve_model(MODEL)), num_labels=1, max_length=a.max_length, device="cpu")
            rows = [(g["query"], d, float(i == 0)) for g in items for i, d in enumerate([g["positive"], *g["negatives"]])]
            train = Dataset.from_dict({"query": [r[0] for r in rows], "document": [r[1] for r in rows],
                                       "label": [r[2] for r in rows]})
            trainer = CrossEncoderTrainer(model=model, args=_train_args(CrossEncoderTrainingArguments, scratch, pair_batch,
                                                                        a.train_steps, **train_bf16),
                                          train_dataset=train, loss=BinaryCrossEntropyLoss(model), callbacks=[clock])
        base = rss_mb()
        trainer.train()
        t = clock.times
        c = clock.cpu
        result.update(throughput=pair_batch * (len(t) - 1) / (t[-1] - t[0]),
                      cpu_throughput=pair_batch * (len(t) - 1) / (c[-1] - c[0]), steps=len(t))
    elif task == "rerank":
        if side == "ssft":  # ssft's reranking path: PairDataset (pairs sorted by length) → RankingTrainer.score → predict
            from ssft.data.beir import load_dataset
            from ssft.data.examples import PairDataset
            from ssft.training.prediction import prediction_trainer

            model = ssft_model("cross", a.rerank_max_length, 32)
            model.requires_grad_(False)
            openvino_side(model, variant, [(g["query"], d) for g in groups for d in [g["positive"], *g["negatives"]]])
            trainer = prediction_trainer(model, a.eval_batch_size, precision=ssft_precision)
            run = data["rerank_run"]
            dataset = PairDataset(run, max(len(docs) for docs in run.values()), load_dataset(a.dataset))
            warm = next(iter(run))
            trainer.score(PairDataset({warm: run[warm]}, a.eval_batch_size, dataset.dataset))  # warm-up
            base = rss_mb()
            start, cpu = time.perf_counter(), time.process_time()
            scores = trainer.score(dataset)
        else:
            from sentence_transformers.cross_encoder import CrossEncoder

            from ssft.core.hub import resolve_model

            model = CrossEncoder(str(resolve_model(MODEL)), num_labels=1, max_length=a.rerank_max_length, device="cpu",
                                 **st_kwargs)
            if variant.startswith("ov"):
                st_openvino(model, scratch, "logits", a.threads,
                            st_calibration(model, [(g["query"], d) for g in groups for d in [g["positive"], *g["negatives"]]],
                                           a) if variant == "ovint8" else None)
            with st_autocast:
                model.predict(pairs[: a.eval_batch_size], batch_size=a.eval_batch_size)  # warm-up
                base = rss_mb()
                start, cpu = time.perf_counter(), time.process_time()
                scores = model.predict(pairs, batch_size=a.eval_batch_size, show_progress_bar=False)
        assert len(scores) == len(pairs)
        result["outputs"] = [float(x) for x in scores]
        result.update(throughput=len(pairs) / (time.perf_counter() - start),
                      cpu_throughput=len(pairs) / (time.process_time() - cpu))
    elif task == "encode":
        if side == "ssft":
            from ssft.eval.retrieve import encode_corpus

            model = ssft_model("dense", a.rerank_max_length, 32)
            model.requires_grad_(False)
            openvino_side(model, variant, [d for g in groups for d in [g["positive"], *g["negatives"]]])
            with precision.inference(model, ssft_precision) as model:
                encode_corpus(model, corpus[: a.eval_batch_size], a.eval_batch_size)  # warm-up
                base = rss_mb()
                start, cpu = time.perf_counter(), time.process_time()
                vectors = encode_corpus(model, corpus, a.eval_batch_size)
        else:
            from sentence_transformers import SentenceTransformer

            from ssft.core.hub import resolve_model

            model = SentenceTransformer(str(resolve_model(MODEL)), device="cpu", **st_kwargs)
            model.max_seq_length = a.rerank_max_length
            if variant.startswith("ov"):
                st_openvino(model, scratch, "last_hidden_state", a.threads,
                            st_calibration(model, [d for g in groups for d in [g["positive"], *g["negatives"]]], a)
                            if variant == "ovint8" else None)
            with st_autocast:
                model.encode(corpus[: a.eval_batch_size], batch_size=a.eval_batch_size, normalize_embeddings=True)  # warm-up
                base = rss_mb()
                start, cpu = time.perf_counter(), time.process_time()
                vectors = model.encode(corpus, batch_size=a.eval_batch_size, normalize_embeddings=True,
                                       show_progress_bar=False)
        assert len(vectors) == len(corpus)
        if a.openvino:  # agreement with the fp32 side of the same library (vectors row by row)
            result["outputs"] = [[round(float(x), 6) for x in row] for row in vectors]
        result.update(throughput=len(corpus) / (time.perf_counter() - start),
                      cpu_throughput=len(corpus) / (time.process_time() - cpu))
    else:
        raise ValueError(task)
    result.update(peak_rss_mb=rss_mb(), rss_before_mb=base, unit=UNITS[task])
    if side == "ssft":
        result["precision"] = result_precision if task in INFERENCE_TASKS else variant_training
    return result


def openvino_side(model, variant: str, calibration: list) -> None:
    """ssft's OpenVINO sides (``ovfp32`` / ``ovbf16`` / ``ovint8``): the transformer served by OpenVINO
    (``ssft.models.interop.openvino``); int8 calibrated on NFCorpus *training* texts (never the timed ones)."""
    if variant.startswith("ov"):
        from ssft.models.interop.openvino import serve_openvino

        serve_openvino(model, variant[2:], calibration)


def st_calibration(model, items: list, a) -> list[dict]:
    """sentence-transformers + OpenVINO int8's calibration: the same items ssft's int8 side draws (at most
    ``CALIBRATION_SIZE``, seed 0, NFCorpus *training* texts or pairs), tokenised by sentence-transformers itself in
    batches of the evaluation batch size, as NumPy input dicts."""
    from ssft.models.interop.openvino import CALIBRATION_SIZE, calibration_sample

    items = calibration_sample(items, CALIBRATION_SIZE, seed=0)
    inputs = []
    for start in range(0, len(items), a.eval_batch_size):
        chunk = items[start : start + a.eval_batch_size]
        if isinstance(chunk[0], tuple):  # a CrossEncoder's pairs
            batch = model.tokenizer([q for q, _ in chunk], [d for _, d in chunk], padding=True,
                                    truncation="longest_first", max_length=a.rerank_max_length, return_tensors="np")
        else:
            batch = {k: v.numpy() for k, v in model.tokenize(chunk).items() if hasattr(v, "numpy")}
        inputs.append(dict(batch))
    return inputs


def st_openvino(model, scratch: Path, output: str, threads: int, calibration: list[dict] | None = None) -> None:
    """sentence-transformers + OpenVINO: its ``backend="openvino"`` needs optimum-intel, which pins a transformers
    older than ours and cannot be installed beside it; so the equivalent: each Transformer module's model converted by
    ``openvino.convert_model`` into ST's folder layout (``openvino/openvino_model.xml``), read back and compiled with
    OpenVINO's defaults (as optimum-intel does: no precision hint, i.e. bf16 on a CPU with native bf16), the IR's
    inputs fed by name and its named output returned to ST's own modules. ``calibration`` (input dicts): NNCF static
    int8 first, called as ssft calls it for a bi-encoder (``ssft.models.interop.openvino.quantize``: every
    projection quantised; ssft's own cross-encoder keeps attention's query and key projections in float)."""
    import numpy as np
    import openvino as ov
    import torch
    from sentence_transformers.base.modules.transformer import Transformer

    from ssft.models.interop.openvino import Graph, convert, quantize

    class IR(torch.nn.Module):
        def __init__(self, path, config):
            super().__init__()
            read = ov.Core().read_model(str(path))
            self.names = [i.get_any_name() for i in read.inputs]
            if calibration is not None:
                read = quantize(read, [{n: batch[n] for n in self.names} for batch in calibration])
            self.compiled, self.config = ov.Core().compile_model(read, "CPU", {"INFERENCE_NUM_THREADS": threads}), config

        def forward(self, **features):
            result = self.compiled({n: features[n].cpu().numpy() for n in self.names})
            return {output: torch.from_numpy(np.array(result[output]))}

    for i, module in enumerate(m for m in model.modules() if isinstance(m, Transformer)):
        inner = module.model
        path = scratch / f"t{i}" / "openvino" / "openvino_model.xml"
        path.parent.mkdir(parents=True, exist_ok=True)
        ov.save_model(convert(Graph(inner, output)), str(path), compress_to_fp16=False)
        module.model = IR(path, inner.config)


# ---------------------------------------------------------------------------------------------- parent
# each mode's BENCHMARKS.md section and title (--section / --title write a run elsewhere, e.g. another CPU's)
SECTIONS = {"plain": ("vs_sentence_transformers",
                      "ssft vs sentence-transformers: training, reranking and encoding throughput, fp32 and bf16"),
            "openvino": ("vs_sentence_transformers_openvino",
                         "Serving backends: ssft on torch and OpenVINO vs sentence-transformers (+ OpenVINO)"),
            "real": ("vs_sentence_transformers_real",
                     "Serving real variable-length text: ssft against sentence-transformers + OpenVINO, bf16 and int8")}


OPENVINO_SIDES = ("ssft", "ssft_fp32", "ssft_int8", "ssft_ovfp32", "ssft_ovbf16", "ssft_ovint8", "st", "st_ov")
# --real-data: the fastest way each library serves, at bf16 and at int8 (ssft's serving default is ssft_ovbf16)
REAL_SIDES = ("ssft", "ssft_ovbf16", "ssft_ovint8", "st_bf16w", "st_ov", "st_ovint8")
PRESETS = {False: {"rerank_queries": 16, "rerank_depth": 20, "encode_docs": 320},
           True: {"rerank_queries": 20, "rerank_depth": 50, "encode_docs": 300}}


def sides(task: str, results: list[dict] | None = None, openvino: bool = False,
          real_data: bool = False) -> tuple[str, ...]:
    """ssft's default, ssft at the other precision, ST's default, ST under bf16. The default's precision is the
    machine's (inference: eval.precision auto; training: training.bf16 auto); an earlier results.json says which
    other side it ran. ``openvino``: the serving comparison (``OPENVINO_SIDES``) instead; ``real_data``: its
    real-text mode (``REAL_SIDES``)."""
    if real_data:
        return REAL_SIDES
    if openvino:
        return OPENVINO_SIDES
    if results:
        other = next((r["side"] for r in results if r["task"] == task and r["side"] in ("ssft_fp32", "ssft_bf16")),
                     "ssft_fp32")
    else:
        sys.path.insert(0, str(ROOT))
        from ssft.core import precision

        other = "ssft_fp32" if precision.bf16_native("cpu") else "ssft_bf16"
    return ("ssft", other, "st", "st_bf16") + (("st_bf16w",) if task in INFERENCE_TASKS else ())


def run_worker(task: str, side: str, data_file: Path, a, out: Path) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": str(a.threads), "MKL_NUM_THREADS": str(a.threads),
           "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, __file__, "--worker", task, side, "--data-file", str(data_file), *a.passthrough]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    (out / "logs").mkdir(exist_ok=True)
    (out / "logs" / f"{task}.{side}.{int(time.time())}.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise RuntimeError(f"{task}/{side} failed:\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["side"] = side
    return result


def report(results: list[dict], a) -> str:
    import platform

    flags = Path("/proc/cpuinfo").read_text().split() if Path("/proc/cpuinfo").is_file() else []
    wanted = ("avx512_vnni", "avx512_bf16", "amx_bf16", "amx_tile")
    cpu = ", ".join(f for f in wanted if f in flags) or "none of them"
    missing = [f for f in wanted if f not in flags]
    if missing:  # bf16 on AVX-512 alone is ~2x fp32 here; AMX machines gain more (the 3.4x)
        cpu += f"; without {', '.join(missing)}"
    model_name = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                       if line.startswith("model name")), "?") if Path("/proc/cpuinfo").is_file() else "?"
    own = [r for r in results if r["side"] == "ssft" and r.get("precision")]  # ssft's defaults, as resolved here
    default = next((r["precision"] for r in own if r["task"] in INFERENCE_TASKS), "?")
    default_training = next((r["precision"] for r in own if r["task"] not in INFERENCE_TASKS),
                            "fp32 (measured before training.bf16 defaulted to auto)")
    lines = [f"## {a.title}", "",
             f"`python benchmarks/vs_sentence_transformers.py --repeats {a.repeats} --threads {a.threads} --tasks "
             f"{','.join(a.tasks)}` — `{MODEL}` on both sides, {a.dataset} texts, {a.threads} CPU thread(s) each, on "
             f"{platform.machine()} ({model_name}, {os.cpu_count()} cores, CPU flags {cpu}; shared with other jobs: load average "
             f"{a.load[0]:.1f} at the start, {a.load[1]:.1f} at the end). Each (task, side, repeat) ran in its own process, "
             "the sides interleaved repeat by repeat (rotating which goes first); figures are medians over the repeats "
             "of the throughput per CPU-second of the worker (one thread: work done / process CPU time — steadier than "
             "wall-clock on a shared machine; wall-clock medians in the last table).", "",
             f"Sides: `ssft` = ssft's defaults (inference at `eval.precision`'s default, here {default}; training without "
             f"`training.bf16`, i.e. auto, here {default_training}), `ssft_fp32` / `ssft_bf16` = ssft at the other "
             "precision, `st` = sentence-transformers' defaults (fp32), `st_bf16` = sentence-transformers under bf16 "
             "autocast (inference) or `bf16=True` (training), `st_bf16w` = sentence-transformers loading bf16 weights "
             "(`model_kwargs={\"dtype\": torch.bfloat16}`; inference only). **ssft / st_bf16** divides by the faster of "
             "`st_bf16` and `st_bf16w`.", "",
             f"- bi_train: batch {a.batch_size} queries × (positive + 1 BM25 hard negative), in-batch negatives, max length "
             f"{a.max_length}, {a.train_steps} steps (first excluded); ssft dense + contrastive vs SentenceTransformerTrainer + "
             "MultipleNegativesRankingLoss.",
             f"- cross_train: batch {a.cross_queries * 4} pairs ({a.cross_queries} queries × 1 positive + 3 BM25 negatives), max "
             f"length {a.max_length}, BCE; ssft cross vs CrossEncoderTrainer + BinaryCrossEntropyLoss.",
             f"- rerank: {a.rerank_queries} test queries × BM25 top-{a.rerank_depth}, max length {a.rerank_max_length}, batch "
             f"{a.eval_batch_size}; ssft Trainer.predict (RankingTrainer.score over a PairDataset) vs CrossEncoder.predict.",
             f"- encode: {a.encode_docs} corpus documents, max length {a.rerank_max_length}, batch {a.eval_batch_size}; ssft "
             "encode_corpus vs SentenceTransformer.encode.", "",
             "| task | unit | ssft | ssft other precision | st | st_bf16 | st_bf16w | **ssft / st** | **ssft / st_bf16** | "
             "ssft peak RSS MB | st peak RSS MB | n |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]

    def med(task, side, key="cpu_throughput"):
        rs = [r[key] for r in results if r["task"] == task and r["side"] == side]
        return (statistics.median(rs), len(rs)) if rs else (float("nan"), 0)

    wall = []
    for task in a.tasks:
        own, other, st, stb, *weights = (med(task, side)[0] for side in sides(task, results))
        n = min(med(task, side)[1] for side in sides(task, results))
        rss = {side: med(task, side, "peak_rss_mb")[0] for side in ("ssft", "st")}
        best = max([stb, *weights])  # the faster way of giving sentence-transformers bf16
        stw = f"{weights[0]:.2f}" if weights else "–"
        lines.append(f"| {task} | {UNITS[task]} per CPU-s | {own:.2f} | {other:.2f} ({sides(task, results)[1]}) | {st:.2f} | "
                     f"{stb:.2f} | {stw} | **{own / st:.2f}×** | **{own / best:.2f}×** | {rss['ssft']:.0f} | "
                     f"{rss['st']:.0f} | {n} |")
        wall.append(f"{task} " + ", ".join(f"{side} {med(task, side, 'throughput')[0]:.2f}" for side in sides(task, results)))
    lines += ["", "Wall-clock medians (" + "; ".join(wall) + ")."]
    lines += ["", "Every run (throughput per CPU-second, in run order per side): " + "; ".join(
        f"{task} " + " / ".join(f"{side} " + ", ".join(f"{r['cpu_throughput']:.2f}" for r in results
                                                     if r["task"] == task and r["side"] == side)
                                for side in sides(task, results) if any(r["side"] == side for r in results if r["task"] == task))
        for task in a.tasks)]
    return "\n".join(lines)


def agreement(results: list[dict], task: str, side: str, reference: str) -> str:
    """How ``side``'s outputs agree with ``reference``'s on ``task``: rerank, the Spearman correlation of the scores;
    encode, the lowest cosine between a document's two vectors."""
    import numpy as np
    from scipy.stats import spearmanr

    if side == reference:
        return "reference"
    mine = next((r.get("outputs") for r in results if r["task"] == task and r["side"] == side), None)
    ref = next((r.get("outputs") for r in results if r["task"] == task and r["side"] == reference), None)
    if not mine or not ref:
        return "–"
    if task == "rerank":
        return f"Spearman {spearmanr(mine, ref).statistic:.3f} vs {reference}"
    x, y = np.asarray(mine), np.asarray(ref)
    cos = (x * y).sum(1) / np.linalg.norm(x, axis=1) / np.linalg.norm(y, axis=1)
    return f"cosine ≥ {cos.min():.4f} vs {reference}"


def openvino_report(results: list[dict], a) -> str:
    """The serving table: throughput per CPU-second (medians), ratios to ssft on torch (bf16 or fp32: its precision
    default) and to sentence-transformers + OpenVINO, agreement with the same library's fp32 side (rerank: Spearman
    of the scores; encode: the lowest cosine of a document's two vectors)."""
    from ssft.models.interop.openvino import CALIBRATION_SIZE

    flags = Path("/proc/cpuinfo").read_text().split() if Path("/proc/cpuinfo").is_file() else []
    wanted = ("avx512_vnni", "avx512_bf16", "amx_bf16", "amx_tile")
    cpu = ", ".join(f for f in wanted if f in flags) + "; without " + ", ".join(f for f in wanted if f not in flags)
    model_name = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                       if line.startswith("model name")), "?")

    def med(task, side):
        rs = [r["cpu_throughput"] for r in results if r["task"] == task and r["side"] == side]
        return (statistics.median(rs), len(rs)) if rs else (float("nan"), 0)


    precisions = {r["side"]: r.get("precision", "") for r in results if r["side"].startswith("ssft")}
    lines = [f"## {a.title}", "",
             f"`python benchmarks/vs_sentence_transformers.py --openvino --repeats {a.repeats} --threads {a.threads}` — "
             f"`{MODEL}`, {a.dataset} texts, max length {a.rerank_max_length}, batch {a.eval_batch_size}, {a.threads} "
             f"CPU thread(s), on {model_name} ({os.cpu_count()} cores, CPU flags {cpu}; shared with other jobs: load "
             f"average {a.load[0]:.1f} at the start, {a.load[1]:.1f} at the end). Each (task, side, repeat) in its own "
             "process, sides interleaved, medians over the repeats of throughput per CPU-second. rerank: "
             f"{a.rerank_queries} test queries × BM25 top-{a.rerank_depth} pairs (a cross-encoder from MiniLM with a "
             f"random head, the same on every ssft side); encode: {a.encode_docs} corpus documents (dense, mean pooling).", "",
             "Sides: `ssft` (torch, --precision auto), `ssft_fp32`, `ssft_int8` (torch dynamic int8, which serving no "
             "longer offers: kept as the reference it was dropped against), "
             "`ssft_ovfp32` / `ssft_ovbf16` (OpenVINO with the f32 / bf16 precision hint), `ssft_ovint8` (OpenVINO, NNCF "
             f"static int8 calibrated on {CALIBRATION_SIZE} NFCorpus *training* texts or pairs, offline), "
             "`st` (sentence-transformers "
             "fp32), `st_ov` (sentence-transformers + OpenVINO: its `backend=\"openvino\"` needs optimum-intel, which pins "
             "an older transformers and does not install beside ssft, so its folder layout `openvino/openvino_model.xml` "
             "is written with `openvino.convert_model` and run with OpenVINO's defaults inside ST's own modules). "
             "ssft's serving default (`--backend auto --precision auto`) is `ssft_ovbf16` where OpenVINO is installed "
             "and the job has at least 500 inputs per thread (any real reranking or corpus), `ssft` below that.", "",
             "| task | side | precision | per CPU-s | vs `ssft` (torch) | vs `st_ov` | agreement | n |",
             "|---|---|---|---:|---:|---:|---|---:|"]
    for task in a.tasks:
        base, st_ov = med(task, "ssft")[0], med(task, "st_ov")[0]
        for side in OPENVINO_SIDES:
            value, n = med(task, side)
            if not n:
                continue
            lines.append(f"| {task} | {side} | {precisions.get(side, 'fp32' if side == 'st' else 'OpenVINO default')} | "
                         f"{value:.2f} {UNITS[task]} | {value / base:.2f}× | {value / st_ov:.2f}× | "
                         f"{agreement(results, task, side, 'st' if side.startswith('st') else 'ssft_fp32')} | {n} |")
    return "\n".join(lines)


def real_data_report(results: list[dict], accounting: dict, a) -> str:
    """The real-text serving table: per task and side, throughput per CPU-second (medians), the ratio to
    sentence-transformers + OpenVINO at the same precision class (bf16: ``st_ov``, int8: ``st_ovint8``), how the
    side's library batches (token efficiency: real tokens / token positions computed), the useful FLOPs it does per
    CPU-second (every row at its own length, as a full encoder) and their share of the best bf16 matmul throughput
    measured here, and agreement with the same library's torch bf16 side."""

    model_name = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                       if line.startswith("model name")), "?")
    flags = Path("/proc/cpuinfo").read_text().split()
    wanted = ("avx512_vnni", "avx512_bf16", "amx_bf16", "amx_tile")
    cpu = ", ".join(f for f in wanted if f in flags) or "none of them"
    if any(f not in flags for f in wanted):
        cpu += "; without " + ", ".join(f for f in wanted if f not in flags)
    peaks = [r["peak_gflops"] for r in results if r["task"] == "peak"]
    peak = {k: max(p[k] for p in peaks) for k in ("bf16", "fp32")} if peaks else {"bf16": float("nan"), "fp32": float("nan")}

    def med(task, side):
        rs = [r["cpu_throughput"] for r in results if r["task"] == task and r["side"] == side]
        return (statistics.median(rs), len(rs)) if rs else (float("nan"), 0)


    precisions = {"ssft": "bf16 (torch)", "ssft_ovbf16": "bf16 (OpenVINO)", "ssft_ovint8": "int8 (OpenVINO + NNCF)",
                  "st_bf16w": "bf16 weights (torch)", "st_ov": "OpenVINO default (bf16 here)",
                  "st_ovint8": "int8 (OpenVINO + NNCF)"}
    lines = [f"## {a.title}", "",
             f"`python benchmarks/vs_sentence_transformers.py --real-data --dataset {a.dataset} --rerank-max-length "
             f"{a.rerank_max_length} --rerank-queries {a.rerank_queries} --rerank-depth {a.rerank_depth} --encode-docs "
             f"{a.encode_docs} --repeats {a.repeats} --threads {a.threads}` — `{MODEL}`, max length "
             f"{a.rerank_max_length}, batch {a.eval_batch_size}, "
             f"{a.threads} CPU thread(s), on {model_name} ({os.cpu_count()} cores, CPU flags {cpu}; load average "
             f"{a.load[0]:.1f} at the start, {a.load[1]:.1f} at the end). " + "; ".join(
                 f"rerank: {accounting['items']['rerank']} (query, passage) pairs, the BM25 top-{a.rerank_depth} of "
                 f"{a.rerank_queries} {a.dataset} test queries (a MiniLM cross-encoder with a random head)"
                 if task == "rerank" else
                 f"encode: {accounting['items']['encode']} {a.dataset} documents (dense, mean pooling)"
                 for task in a.tasks) + ". Each (task, side, repeat) in its own process, sides interleaved, medians "
             "over the repeats of throughput per CPU-second.", "",
             "Each library batches as it does: sentence-transformers sorts by characters, ssft by the exact token "
             "counts its rankers batch by; each batch is padded to its longest row. Token efficiency: real tokens / "
             "token positions computed. Useful FLOPs: the encoder's matmuls with every row at its own length (as a "
             "full encoder: ssft's cross-encoder skips most of the last layer for [CLS], so its share can pass what "
             "padding alone allows); % of peak: against the best bf16 matmul throughput torch reaches on this CPU per "
             f"CPU-second ({peak['bf16']:.0f} GFLOP/s; fp32 {peak['fp32']:.0f}). int8 sides are set against the same "
             "bf16 peak (no int8 peak measured).", "",
             "| task | side | precision | per CPU-s | vs `st_ov` | vs `st_ovint8` | batches by | token efficiency | "
             "useful GFLOP per CPU-s | % of bf16 peak | agreement | n |",
             "|---|---|---|---:|---:|---:|---|---:|---:|---:|---|---:|"]
    for task in a.tasks:
        items = accounting["items"][task]
        for side in REAL_SIDES:
            value, n = med(task, side)
            if not n:
                continue
            family = "st" if side.startswith("st") else "ssft"
            book = accounting[task][family]
            gflops = book["useful_flops"] / items * value / 1e9
            lines.append(f"| {task} | {side} | {precisions[side]} | {value:.2f} {UNITS[task]} | "
                         f"{value / med(task, 'st_ov')[0]:.2f}× | {value / med(task, 'st_ovint8')[0]:.2f}× | "
                         f"{'characters' if family == 'st' else 'exact tokens'} | {book['efficiency']:.1%} | "
                         f"{gflops:.1f} | {gflops / peak['bf16']:.0%} | "
                         f"{agreement(results, task, side, 'st_bf16w' if family == 'st' else 'ssft')} | {n} |")
    lines += [""] + [f"- {task}: {family} computes {accounting[task][family]['positions']:,} token positions for "
                     f"{accounting[task][family]['tokens']:,} real tokens"
                     for task in a.tasks for family in ("st", "ssft")]
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="bench-runs/vs_sentence_transformers")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--tasks", default=",".join(TASKS))
    p.add_argument("--dataset", default="nfcorpus")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--cross-queries", type=int, default=4, help="cross_train: queries per batch (× 4 pairs each)")
    p.add_argument("--train-steps", type=int, default=6)
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--rerank-queries", type=int, default=None, help="test queries reranked (default 16; --real-data 20)")
    p.add_argument("--rerank-depth", type=int, default=None, help="BM25 top-k of each (default 20; --real-data 50)")
    p.add_argument("--rerank-max-length", type=int, default=256)
    p.add_argument("--encode-docs", type=int, default=None, help="corpus documents encoded (default 320; --real-data 300)")
    p.add_argument("--eval-batch-size", type=int, default=32)
    p.add_argument("--write", action="store_true", help="write the section of BENCHMARKS.md")
    add_section_options(p, "", "")  # empty: the mode's own section and title (SECTIONS)
    add_notes_option(p)
    p.add_argument("--openvino", action="store_true",
                   help="the serving comparison: ssft torch (default, fp32, dynamic int8), ssft on OpenVINO (fp32 / bf16 "
                        "hints, NNCF int8), sentence-transformers fp32 and + OpenVINO (rerank and encode only)")
    p.add_argument("--real-data", action="store_true",
                   help="serving on real variable-length text: BM25 top-k pairs and a corpus sample as they come, each "
                        "library batching as it does (sentence-transformers by characters, ssft by exact token "
                        "count); the fastest bf16 and int8 sides of each, with token efficiency, useful FLOPs and the "
                        "share of this CPU's measured matmul peak")
    p.add_argument("--report-from", help="only report the results.json of an earlier (or cut short) run")
    p.add_argument("--worker", nargs=2, metavar=("TASK", "SIDE"), help=argparse.SUPPRESS)
    p.add_argument("--data-file", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        import logging
        import tempfile

        logging.disable(logging.WARNING)
        data = json.loads(Path(a.data_file).read_text())
        with tempfile.TemporaryDirectory() as scratch:
            print(json.dumps(worker(*a.worker, data, a, Path(scratch))))
        return 0
    for name, value in PRESETS[a.real_data].items():
        if getattr(a, name) is None:
            setattr(a, name, value)
    a.openvino = a.openvino or a.real_data
    mode_section, mode_title = SECTIONS["real" if a.real_data else "openvino" if a.openvino else "plain"]
    a.section, a.title = a.section or mode_section, a.title or mode_title
    a.tasks = [t for t in a.tasks.split(",") if t]
    if a.openvino:
        a.tasks = [t for t in a.tasks if t in INFERENCE_TASKS]
    names = ("dataset", "threads", "batch_size", "cross_queries", "train_steps", "max_length", "rerank_max_length",
             "eval_batch_size")
    a.passthrough = (["--openvino"] if a.openvino else []) + (["--real-data"] if a.real_data else []) + [arg for name in names
                     for arg in (f"--{name.replace('_', '-')}", str(getattr(a, name)))]
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    if a.report_from:
        results = json.loads(Path(a.report_from).read_text())
        a.repeats = 1 + max(r["repeat"] for r in results)
        a.tasks = [t for t in a.tasks if any(r["task"] == t for r in results)]
        load_file = Path(a.report_from).with_name("load.json")
        a.load = tuple(json.loads(load_file.read_text())) if load_file.is_file() else (float("nan"), float("nan"))
        return finish(results, a, out)
    data_file = out / "data.json"
    build_data(data_file, a)
    load_start = os.getloadavg()[0]
    results = []
    started = time.time()
    for repeat in range(a.repeats):
        if a.real_data:  # the matmul peak, once per repeat (the best is reported)
            results.append({**run_worker("peak", "torch", data_file, a, out), "repeat": repeat})
        for task in a.tasks:
            order = sides(task, openvino=a.openvino, real_data=a.real_data)
            shift = (repeat + a.tasks.index(task)) % len(order)
            for side in order[shift:] + order[:shift]:
                r = run_worker(task, side, data_file, a, out)
                r["repeat"] = repeat
                results.append(r)
                print(f"[{time.time() - started:6.0f}s] repeat {repeat} {task:12s} {side:5s} {r['throughput']:8.2f} "
                      f"{r['unit']} ({r['cpu_throughput']:.2f} per CPU-s)  peak RSS {r['peak_rss_mb']:.0f} MB", flush=True)
                (out / "results.json").write_text(json.dumps(results, indent=1))
    a.load = (load_start, os.getloadavg()[0])
    (out / "load.json").write_text(json.dumps(a.load))
    return finish(results, a, out)


def finish(results: list[dict], a, out: Path) -> int:
    if a.real_data:
        data_file = Path(a.report_from).with_name("data.json") if a.report_from else out / "data.json"
        text = real_data_report(results, json.loads(data_file.read_text())["accounting"], a)
    else:
        text = openvino_report(results, a) if a.openvino else report(results, a)
    (out / "report.md").write_text(text + "\n")
    print(text)
    if a.write:
        write_section(a.section, with_notes(text, a.notes))
    return 0


if __name__ == "__main__":
    sys.exit(main())

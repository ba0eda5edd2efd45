"""Training throughput (tokens/s) and model FLOPs utilisation (MFU) of ssft's cross-encoder and dense bi-encoder.

    python benchmarks/train_throughput.py --precision bf16 --seq-len 256 --write      # on a GPU: issue 8 part 4
    python benchmarks/train_throughput.py --size tiny --precision fp32 --steps 4      # a CPU smoke run

What runs is ssft's own training path — ``RankingTrainer`` over ``RankerCollator`` batches, accelerate's
autocast for bf16 / fp16 — on a BERT-base-sized encoder (hidden 768, 12 layers, 12 heads, intermediate 3072,
vocabulary 30,522) with random weights: speed does not depend on their values, and no download is needed
(the all-MiniLM-L6-v2 tokenizer that pip ships has BERT-base's 30,522-word vocabulary).

- ``cross``: monoBERT + BCE; each query comes with 4 documents (1 positive, 3 negatives) and each (query,
  document) pair is ``--seq-len`` tokens (texts long enough to be truncated there). ``--batch`` pairs a step.
- ``bi``: dense dual encoder (mean pooling, shared backbone) + contrastive loss with in-batch negatives:
  ``--batch`` queries a step of up to 32 tokens, each with a positive and one hard negative of ``--seq-len``
  tokens.

Tokens/s counts the tokens the encoder attends (padding left out) in the timed steps (after ``--warmup``
steps). Model FLOPs are the matrix products of those tokens (attention included, embeddings and the small
ranker heads left out), training = 3 × forward (``training_flops``); MFU = model FLOP/s ÷ the device's peak
dense FLOP/s for the precision (``PEAK_TFLOPS``, or ``--peak-tflops``). A CPU has no entry: MFU is left blank
unless ``--peak-tflops`` is given.
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SIZES = {  # hidden, layers, heads, intermediate
    "base": (768, 12, 12, 3072),
    "tiny": (128, 2, 2, 512),
}
# dense (no sparsity) tensor-core peaks in TFLOP/s from the vendors' data sheets; first match of the name wins
PEAK_TFLOPS = [
    ("H100 PCIe", {"bf16": 756.5, "fp16": 756.5, "fp32": 51.2}),
    ("H100 NVL", {"bf16": 835.5, "fp16": 835.5, "fp32": 60.0}),
    ("H100", {"bf16": 989.4, "fp16": 989.4, "fp32": 66.9}),
    ("H200", {"bf16": 989.4, "fp16": 989.4, "fp32": 66.9}),
    ("A100", {"bf16": 312.0, "fp16": 312.0, "fp32": 19.5}),
    ("L40S", {"bf16": 362.1, "fp16": 362.1, "fp32": 91.6}),
    ("L4", {"bf16": 121.0, "fp16": 121.0, "fp32": 30.3}),
]


def forward_flops(lengths: list[int], hidden: int, layers: int, intermediate: int) -> float:
    """Forward FLOPs of the encoder on sequences of ``lengths`` attended tokens: per layer and token, the
    query / key / value / output projections (4·h² multiply-adds) and the feed-forward pair (2·h·i), and per
    layer and sequence of n tokens the two attention products QKᵀ and AV (2·n²·h); 2 FLOPs a multiply-add."""
    per_token = layers * (4 * hidden * hidden + 2 * hidden * intermediate)
    return float(sum(2 * n * per_token + 2 * layers * 2 * n * n * hidden for n in lengths))


def training_flops(lengths: list[int], hidden: int, layers: int, intermediate: int) -> float:
    """Forward + backward (the backward computes two products for every one of the forward): 3 × forward."""
    return 3.0 * forward_flops(lengths, hidden, layers, intermediate)


def peak_tflops(device_name: str, precision: str) -> float | None:
    for key, peaks in PEAK_TFLOPS:
        if key.lower() in device_name.lower():
            return peaks.get(precision)
    return None


class CountingCollator:
    """ssft's ``RankerCollator``, recording the attended length of every encoded sequence of each batch."""

    def __init__(self, collator):
        self.collator = collator
        self.lengths: list[list[int]] = []

    def __call__(self, items):
        batch = self.collator(items)
        masks = [v for k, v in batch.items() if k.endswith("attention_mask")]
        self.lengths.append([int(n) for mask in masks for n in mask.sum(1).tolist()])
        return batch


def random_bert(folder: Path, shape: tuple[int, int, int, int], tokenizer: str | None = None) -> Path:
    """A random BERT of ``shape`` (hidden, layers, heads, intermediate) saved in ``folder`` (once) with the
    all-MiniLM-L6-v2 tokenizer that pip ships (BERT-base's 30,522-word vocabulary), or the tokenizer folder
    ``tokenizer`` (a machine without that package: its tokenizer files alone are a few hundred KB)."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    from ssft.core.hub import resolve_model

    if not (folder / "config.json").is_file():
        hidden, layers, heads, intermediate = shape
        words = AutoTokenizer.from_pretrained(tokenizer or resolve_model("sentence-transformers/all-MiniLM-L6-v2"))
        torch.manual_seed(0)
        config = BertConfig(vocab_size=words.vocab_size, hidden_size=hidden, num_hidden_layers=layers,
                            num_attention_heads=heads, intermediate_size=intermediate, max_position_embeddings=512)
        BertModel(config, add_pooling_layer=False).save_pretrained(folder)
        words.save_pretrained(folder)
    return folder


def build_model(folder: Path, size: str, architecture: str, seq_len: int):
    from ssft.config.recipe import ModelConfig
    from ssft.config.registry import MODELS

    random_bert(folder, SIZES[size])
    cfg = ModelConfig(architecture=architecture, name=str(folder), max_length=seq_len, query_max_length=32,
                      head_learning_rate=None)
    return MODELS.get(architecture).build(cfg, "full", {})


def texts(tokenizer, n: int, words: int, seed: int) -> list[str]:
    """Random lower-case words of the vocabulary: ``words`` of them tokenise to at least as many tokens."""
    pool = sorted(w for w in tokenizer.get_vocab() if w.isalpha() and w.islower() and len(w) > 2)
    rng = random.Random(seed)
    return [" ".join(rng.choices(pool, k=words)) for _ in range(n)]


def run(task: str, a, scratch: Path) -> dict:
    import torch
    from transformers import TrainerCallback, TrainingArguments

    from ssft.data.examples import RankerCollator
    from ssft.losses import ContrastiveLoss, PointwiseBCELoss
    from ssft.training.trainer import RankingTrainer

    architecture = "cross" if task == "cross" else "dense"
    model = build_model(scratch / f"bert-{a.size}", a.size, architecture, a.seq_len)
    steps = a.warmup + a.steps
    if task == "cross":
        queries = a.batch // 4
        docs = texts(model.tokenizer, queries * steps * 4, a.seq_len, 1)
        query_texts = texts(model.tokenizer, queries * steps, 8, 2)
        train = [{"query": q, "documents": docs[4 * i : 4 * i + 4]} for i, q in enumerate(query_texts)]
        loss, per_device = PointwiseBCELoss(), queries
    else:
        docs = texts(model.tokenizer, a.batch * steps * 2, a.seq_len, 1)
        query_texts = texts(model.tokenizer, a.batch * steps, 24, 2)
        train = [{"query": q, "documents": docs[2 * i : 2 * i + 2]} for i, q in enumerate(query_texts)]
        loss, per_device = ContrastiveLoss(), a.batch

    class Clock(TrainerCallback):
        def __init__(self):
            self.times: list[float] = []

        def on_step_end(self, args, state, control, **kwargs):
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            self.times.append(time.perf_counter())

    clock = Clock()
    collator = CountingCollator(RankerCollator(model))
    on_gpu = torch.cuda.is_available() and not a.cpu
    args = TrainingArguments(output_dir=str(scratch / "out"), per_device_train_batch_size=per_device, max_steps=steps,
                             learning_rate=1e-5, warmup_steps=0, report_to=[], save_strategy="no", logging_strategy="no",
                             disable_tqdm=True, seed=0, remove_unused_columns=False, dataloader_pin_memory=on_gpu,
                             bf16=a.precision == "bf16", fp16=a.precision == "fp16", use_cpu=not on_gpu)
    trainer = RankingTrainer(model=model, args=args, train_dataset=train, data_collator=collator, loss=loss,
                             callbacks=[clock])
    if on_gpu:
        torch.cuda.reset_peak_memory_stats()
    trainer.train()
    hidden, layers, _, intermediate = SIZES[a.size]
    timed = collator.lengths[a.warmup : len(clock.times)]  # one collated batch a step (no accumulation)
    seconds = clock.times[-1] - clock.times[a.warmup - 1]
    tokens = sum(sum(lengths) for lengths in timed)
    flops = sum(training_flops(lengths, hidden, layers, intermediate) for lengths in timed)
    device = torch.cuda.get_device_name() if on_gpu else "CPU"
    peak = a.peak_tflops or (peak_tflops(device, a.precision) if on_gpu else None)
    return {"task": task, "device": device, "precision": a.precision, "steps": len(timed), "seconds": seconds,
            "tokens_per_s": tokens / seconds, "sequences_per_step": statistics.mean(len(x) for x in timed),
            "model_tflops_per_s": flops / seconds / 1e12, "peak_tflops": peak,
            "mfu": flops / seconds / 1e12 / peak if peak else None,
            "peak_memory_gb": torch.cuda.max_memory_allocated() / 2**30 if on_gpu else None}


def report(results: list[dict], a) -> str:
    device = results[0]["device"]
    lines = ["## Training throughput and MFU of a BERT-sized encoder", "",
             f"`python benchmarks/train_throughput.py --size {a.size} --precision {a.precision} --seq-len {a.seq_len} "
             f"--batch {a.batch} --steps {a.steps} --warmup {a.warmup}` on **{device}**: ssft's RankingTrainer, a "
             f"randomly initialised BERT-{a.size} encoder {SIZES[a.size]} (hidden, layers, heads, intermediate), "
             f"{a.precision}. cross: {a.batch} (query, document) pairs of {a.seq_len} tokens a step, BCE; bi: dense dual "
             f"encoder, {a.batch} queries (≤ 32 tokens) × (positive + hard negative of {a.seq_len} tokens) a step, "
             "contrastive loss over in-batch negatives. Tokens = attended tokens through the encoder; model FLOPs = 3 × "
             "the forward's matrix products (attention included); MFU against the device's dense peak "
             f"({results[0]['peak_tflops'] or '–'} TFLOP/s).", "",
             "| task | tokens/s | sequences / step | model TFLOP/s | MFU | peak GPU memory GB | timed steps |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        mfu = f"{100 * r['mfu']:.1f} %" if r["mfu"] is not None else "–"
        mem = f"{r['peak_memory_gb']:.1f}" if r["peak_memory_gb"] is not None else "–"
        lines.append(f"| {r['task']} | {r['tokens_per_s']:,.0f} | {r['sequences_per_step']:.0f} | "
                     f"{r['model_tflops_per_s']:.3g} | {mfu} | {mem} | {r['steps']} |")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", default="cross,bi")
    p.add_argument("--size", choices=sorted(SIZES), default="base")
    p.add_argument("--precision", choices=("bf16", "fp16", "fp32"), default="bf16")
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--batch", type=int, default=32, help="cross: pairs a step (a multiple of 4); bi: queries a step")
    p.add_argument("--steps", type=int, default=30, help="timed steps")
    p.add_argument("--warmup", type=int, default=5, help="steps before the timing starts")
    p.add_argument("--peak-tflops", type=float, help="the device's peak for the precision (default: PEAK_TFLOPS)")
    p.add_argument("--cpu", action="store_true", help="train on the CPU even where a GPU is present")
    p.add_argument("--out", help="also write the results as JSON here")
    p.add_argument("--write", action="store_true", help="write the section of BENCHMARKS.md")
    a = p.parse_args()
    if a.batch % 4 and "cross" in a.tasks:
        p.error("--batch: cross takes 4 pairs a query, so a multiple of 4")
    if a.warmup < 1:
        p.error("--warmup: at least 1 (the timing starts at the end of a step)")
    sys.path.insert(0, str(ROOT))
    results = []
    with tempfile.TemporaryDirectory() as scratch:
        for task in [t for t in a.tasks.split(",") if t]:
            if task not in ("cross", "bi"):
                p.error(f"--tasks: unknown task '{task}' (cross, bi)")
            results.append(run(task, a, Path(scratch)))
            print(json.dumps(results[-1]), flush=True)
    text = report(results, a)
    print(text)
    if a.out:
        Path(a.out).write_text(json.dumps(results, indent=1) + "\n")
    if a.write:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from report import write_section

        write_section("train_throughput", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

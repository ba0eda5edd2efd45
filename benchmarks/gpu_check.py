"""One prepared check of ssft's GPU path: mixed-precision training under ``accelerate launch``, inference, faiss and
a 2-process gather of in-batch negatives, in one command that prints a table and writes ``results/gpu_check.json``.

    python benchmarks/gpu_check.py                 # on a GPU machine: the whole check (about 8 minutes on one H100)
    python benchmarks/gpu_check.py --dry-run       # the same code on the CPU with tiny models (CI runs this)

What it does, section by section:

1. **train** -- for cross (full, lora), ColBERT (lora, ss_lora) and dense (lora, ss_lora) on a BERT-base-sized model
   (all-mpnet-base-v2 where its weights are installed, else a random BERT-base of the same shape: speed does not
   depend on the weights) and on all-MiniLM-L6-v2 (installed weights, else a random model of its shape):
   ``--steps`` training steps (30) at ``--batch`` (32) sequences x ``--seq-len`` (256) tokens through ssft's
   ``RankingTrainer``, once per precision under ``accelerate launch --mixed_precision bf16`` and ``fp16`` (the
   Trainer's GradScaler), from the same seed as a float32 reference of the first 3 steps computed on the CPU.
   Dropout is off everywhere, so the first step's loss (computed before any update, on the same batch) depends only
   on the arithmetic: it must agree with the reference within ``FIRST_LOSS_TOLERANCE``. The examples are a fixed
   set of two batches (each positive holds its query's words), so the loss of the last steps must fall below that
   of the first ones. Tokens/s, model FLOP/s and MFU against the card's dense peak for the precision (the FLOP
   count is the matrix products' of the encoder: 3 x forward for full fine-tuning, 2 x forward for the adapter
   methods, whose frozen weights get no weight gradient -- see ``training_flops``).
2. **inference** -- reranking (cross) and document encoding (dense) throughput in bf16 weights with SDPA attention;
   the scores equal the CPU float32 scores within ``INFERENCE_TOLERANCE``.
3. **faiss** -- an exact inner-product index on the GPU (``faiss.StandardGpuResources``) where faiss has GPU
   support, compared with the CPU index's top-k; otherwise says so and times faiss-cpu on the machine's cores.
4. **ddp** -- two processes (NCCL over two GPUs; gloo over one shared GPU, or over the CPU in the dry run) compute
   the dense contrastive loss with in-batch negatives gathered across processes; it must equal the one-process
   loss at the same global batch (``ssft.models.dense.gathered_in_batch_rows``).

The exit code is 0 when every check passed, 1 otherwise (the table says which failed). Nothing is downloaded at run
time. A GPU machine whose Python has torch, transformers, peft and accelerate but not the rest of ssft's imports
needs them installed first (the ones this script reaches: datasets, ir_measures and faiss-cpu, with their own
dependencies); where the pip-shipped weights are not installed the models are random ones of the same shape, and the
table says so in its ``weights`` column.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from train_throughput import CountingCollator, forward_flops, peak_tflops, random_bert  # noqa: E402

# (label, hub id whose installed weights are used when present, shape used otherwise: hidden, layers, heads, inter.)
MODELS_FULL = [("mpnet-base", "sentence-transformers/all-mpnet-base-v2", (768, 12, 12, 3072)),
               ("minilm-l6", "sentence-transformers/all-MiniLM-L6-v2", (384, 6, 12, 1536))]
MODELS_DRY = [("tiny", None, (32, 2, 2, 64))]
# (architecture, method, loss): semi-Siamese methods need a bi-encoder, so the cross-encoder runs full and lora
CONFIGS = [("cross", "full", "bce"), ("cross", "lora", "bce"), ("colbert", "lora", "pairwise_softmax"),
           ("colbert", "ss_lora", "pairwise_softmax"), ("dense", "lora", "contrastive"),
           ("dense", "ss_lora", "contrastive")]
# |first-step loss - CPU fp32 reference| <= atol + rtol * |reference|: bf16 keeps 8 bits of mantissa, fp16 11
FIRST_LOSS_TOLERANCE = {"bf16": (2e-2, 2e-2), "fp16": (5e-3, 5e-3), "fp32": (1e-4, 1e-4)}
# max |score - CPU fp32 score| / max |CPU fp32 score| under bf16 weights; the dry run's tiny random cross-encoder
# scores are small sums of near-cancelling terms (hidden size 32), whose relative bf16 error is several times larger
INFERENCE_TOLERANCE = {"full": 5e-2, "dry": 0.25}
MFU_TARGET = 0.40  # BERT-base bf16 full fine-tuning at 256 tokens (published Hugging Face runs reach 30-50 %)
REFERENCE_STEPS = 3


# ---------------------------------------------------------------------------------------------- models and data
def model_folder(scratch: Path, label: str, hub_id: str | None, shape: tuple[int, int, int, int],
                 tokenizer: str | None = None) -> tuple[Path, str]:
    """(folder, 'installed' | 'random'): the installed weights of ``hub_id`` when a pip package ships them, else a
    random BERT of ``shape`` saved with the all-MiniLM-L6-v2 tokenizer (BERT-base's 30,522-word vocabulary)."""
    from ssft.core.errors import SsftError
    from ssft.core.hub import resolve_model

    if hub_id is not None:
        try:
            return Path(resolve_model(hub_id)), "installed"
        except (SsftError, OSError):
            pass
    return random_bert(scratch / f"random-{label}", shape, tokenizer), "random"


def build_ranker(folder: Path, architecture: str, method: str, seq_len: int):
    """The ranker with every dropout off (the first step's loss then depends on the arithmetic alone)."""
    import torch

    from ssft.config.recipe import ModelConfig
    from ssft.config.registry import MODELS

    torch.manual_seed(0)  # heads, projections, LoRA's A matrices: the same on every device
    cfg = ModelConfig(architecture=architecture, name=str(folder), max_length=seq_len, query_max_length=32,
                      head_learning_rate=None)
    options = {"r": 8} if "lora" in method else {}
    ranker = MODELS.get(architecture).build(cfg, method, options)
    for module in ranker.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    return ranker


def ranker_config(ranker):
    """The transformer's config (the first module holding one)."""
    return next((m.config for m in ranker.modules() if hasattr(m, "config") and hasattr(m.config, "hidden_size")), None)


def encoder_shape(ranker) -> tuple[int, int, int]:
    config = ranker_config(ranker)
    return config.hidden_size, config.num_hidden_layers, config.intermediate_size


def training_examples(tokenizer, architecture: str, batch: int, seq_len: int, seed: int = 1) -> list[dict]:
    """Two batches' worth of training groups: each positive holds its query's words among random ones, so the
    ranker can learn to prefer it; cycled for every step, so the loss falls as the model fits them."""
    pool = sorted(w for w in tokenizer.get_vocab() if w.isalpha() and w.islower() and len(w) > 2)
    rng = random.Random(seed)
    per_group = 4 if architecture == "cross" else 2  # cross: 32 pairs = 8 queries x 4; bi: 32 queries x 2 documents
    groups = 2 * (batch // per_group if architecture == "cross" else batch)
    examples = []
    for _ in range(groups):
        query = rng.choices(pool, k=6)
        positive = rng.choices(pool, k=seq_len)
        positive[: len(query)] = query
        negatives = [rng.choices(pool, k=seq_len) for _ in range(per_group - 1)]
        examples.append({"query": " ".join(query), "documents": [" ".join(positive), *(" ".join(n) for n in negatives)]})
    return examples


def training_flops(lengths: list[int], shape: tuple[int, int, int], method: str) -> float:
    """Matrix-product FLOPs of one training step: full fine-tuning computes the input and the weight gradients
    (3 x forward); adapters leave the encoder's weights frozen, so their backward computes the input gradients only
    (2 x forward; the LoRA products are < 2 % of it and left out)."""
    hidden, layers, intermediate = shape
    return (3.0 if method == "full" else 2.0) * forward_flops(lengths, hidden, layers, intermediate)


# ---------------------------------------------------------------------------------------------- 1. training
def train_one(folder: Path, architecture: str, method: str, loss_name: str, a, precision: str, steps: int,
              use_cpu: bool, scratch: Path) -> dict:
    """``steps`` training steps of one configuration; returns the per-step losses, tokens/s and MFU."""
    import torch
    from transformers import TrainerCallback, TrainingArguments

    from ssft.config.registry import LOSSES
    from ssft.data.examples import RankerCollator
    from ssft.training.trainer import RankingTrainer

    ranker = build_ranker(folder, architecture, method, a.seq_len)
    examples = training_examples(ranker.tokenizer, architecture, a.batch, a.seq_len)
    per_device = a.batch // 4 if architecture == "cross" else a.batch
    on_gpu = torch.cuda.is_available() and not use_cpu

    class Steps(TrainerCallback):
        def __init__(self):
            self.times: list[float] = []
            self.losses: list[float] = []

        def on_step_end(self, args, state, control, **kwargs):
            if on_gpu:
                torch.cuda.synchronize()
            self.times.append(time.perf_counter())

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "loss" in logs:
                self.losses.append(float(logs["loss"]))

    clock = Steps()
    collator = CountingCollator(RankerCollator(ranker))
    args = TrainingArguments(output_dir=str(scratch / "out"), per_device_train_batch_size=per_device, max_steps=steps,
                             learning_rate=a.learning_rate, warmup_steps=0, lr_scheduler_type="constant", report_to=[],
                             save_strategy="no", logging_strategy="steps", logging_steps=1, disable_tqdm=True, seed=0,
                             data_seed=0, remove_unused_columns=False, dataloader_pin_memory=on_gpu,
                             bf16=precision == "bf16", fp16=precision == "fp16", use_cpu=not on_gpu, max_grad_norm=1.0)
    trainer = RankingTrainer(model=ranker, args=args, train_dataset=examples, data_collator=collator,
                             loss=LOSSES.get(loss_name)(), callbacks=[clock])
    if on_gpu:
        torch.cuda.reset_peak_memory_stats()
    trainer.train()
    scaler = getattr(trainer.accelerator, "scaler", None)
    shape = encoder_shape(ranker)
    warm = min(a.warmup, len(clock.times) - 1)  # steps left out of the timing (at least the first: the clock's start)
    timed = collator.lengths[warm : len(clock.times)] if warm >= 1 else []  # one collated batch a step
    seconds = clock.times[-1] - clock.times[warm - 1] if timed else float("nan")
    tokens = sum(sum(lengths) for lengths in timed)
    flops = sum(training_flops(lengths, shape, method) for lengths in timed)
    device = torch.cuda.get_device_name() if on_gpu else "CPU"
    peak = a.peak_tflops or (peak_tflops(device, precision) if on_gpu else None)
    tflops = flops / seconds / 1e12 if seconds == seconds and seconds > 0 else None
    return {"architecture": architecture, "method": method, "loss": loss_name, "precision": precision, "device": device,
            "losses": clock.losses, "grad_scaler": scaler is not None,
            "tokens_per_s": tokens / seconds if tflops is not None else None, "model_tflops_per_s": tflops,
            "peak_tflops": peak, "mfu": tflops / peak if (tflops and peak) else None,
            "peak_memory_gb": torch.cuda.max_memory_allocated() / 2**30 if on_gpu else None}


def train_worker(a) -> int:
    """Runs inside ``accelerate launch --mixed_precision P``: every (model, configuration) at precision P."""
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        for label, hub_id, shape in (MODELS_DRY if a.dry_run else MODELS_FULL):
            folder, weights = model_folder(Path(a.scratch), label, hub_id, shape)
            for architecture, method, loss_name in CONFIGS:
                row = train_one(folder, architecture, method, loss_name, a, a.precision, a.steps, use_cpu=a.dry_run,
                                scratch=scratch)
                results.append({"model": label, "weights": weights, **row})
                print(json.dumps(results[-1]), flush=True)
    Path(a.out).write_text(json.dumps(results) + "\n")
    return 0


def cpu_references(a, scratch: Path) -> dict[tuple[str, str, str], list[float]]:
    """The float32 CPU losses of the first ``REFERENCE_STEPS`` steps of every (model, architecture, method)."""
    import torch

    threads = torch.get_num_threads()
    refs = {}
    for label, hub_id, shape in (MODELS_DRY if a.dry_run else MODELS_FULL):
        folder, _ = model_folder(scratch, label, hub_id, shape, a.tokenizer)
        for architecture, method, loss_name in CONFIGS:
            row = train_one(folder, architecture, method, loss_name, a, "fp32", REFERENCE_STEPS, use_cpu=True,
                            scratch=scratch / "ref")
            refs[(label, architecture, method)] = row["losses"]
    torch.set_num_threads(threads)
    return refs


def launch_training(a, precision: str, scratch: Path) -> list[dict]:
    """The training worker under ``accelerate launch --mixed_precision precision`` (one process)."""
    out = scratch / f"train-{precision}.json"
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", "1", "--num_machines", "1",
           "--mixed_precision", precision, "--dynamo_backend", "no", *(["--cpu"] if a.dry_run else []),
           str(Path(__file__).resolve()), "--worker", "train", "--precision", precision, "--out", str(out),
           "--scratch", str(scratch), "--steps", str(a.steps), "--batch", str(a.batch), "--seq-len", str(a.seq_len),
           "--warmup", str(a.warmup), "--learning-rate", str(a.learning_rate),
           *(["--peak-tflops", str(a.peak_tflops)] if a.peak_tflops else []), *(["--dry-run"] if a.dry_run else [])]
    # ROOT first, the caller's PYTHONPATH kept (packages installed beside the machine's own, e.g. with --target)
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    proc = subprocess.run(cmd, env={**os.environ, "PYTHONPATH": path}, capture_output=True, text=True)
    if proc.returncode != 0:
        return [{"precision": precision, "error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else
                 f"exit {proc.returncode}", "stderr_tail": proc.stderr[-2000:]}]
    return json.loads(out.read_text())


def judge_training(row: dict, refs: dict) -> dict:
    """Adds the verdicts: finite losses, the first step within tolerance of the CPU reference, a falling loss."""
    if "error" in row:
        return {**row, "passed": False, "why": row["error"]}
    losses = row["losses"]
    ref = refs.get((row["model"], row["architecture"], row["method"]))
    atol, rtol = FIRST_LOSS_TOLERANCE[row["precision"]]
    finite = bool(losses) and all(math.isfinite(x) for x in losses)
    first_ok = bool(ref) and finite and abs(losses[0] - ref[0]) <= atol + rtol * abs(ref[0])
    k = max(1, min(5, len(losses) // 3))
    falling = finite and statistics.mean(losses[-k:]) < statistics.mean(losses[:k])
    why = [w for w, ok in (("non-finite loss", finite), ("first-step loss off the CPU reference", first_ok),
                           ("loss not falling", falling)) if not ok]
    return {**row, "cpu_reference": ref, "first_step_diff": abs(losses[0] - ref[0]) if (ref and losses) else None,
            "finite": finite, "first_step_ok": first_ok, "falling": falling, "passed": not why, "why": "; ".join(why)}


# ---------------------------------------------------------------------------------------------- 2. inference
def inference_check(a, scratch: Path) -> list[dict]:
    """Reranking (cross) and encoding (dense) throughput at bf16 weights with SDPA, scores against CPU fp32."""
    import torch

    from ssft.core.precision import set_precision

    on_gpu = torch.cuda.is_available() and not a.dry_run
    device = "cuda" if on_gpu else "cpu"
    label, hub_id, shape = (MODELS_DRY if a.dry_run else MODELS_FULL)[0]
    folder, weights = model_folder(scratch, label, hub_id, shape, a.tokenizer)
    rows = []
    n = 64 if a.dry_run else 2048
    for architecture in ("cross", "dense"):
        ranker = build_ranker(folder, architecture, "full", a.seq_len).eval()
        examples = training_examples(ranker.tokenizer, "dense", n, a.seq_len, seed=7)[:n]
        queries = [e["query"] for e in examples]
        documents = [e["documents"][0] for e in examples]
        reference = score_texts(ranker, architecture, queries[:32], documents[:32], "cpu", a.batch)
        fast = set_precision(ranker.to(device), "bf16")
        got = score_texts(fast, architecture, queries[:32], documents[:32], device, a.batch)
        scale = float(reference.abs().max()) or 1.0
        diff = float((got.float().cpu() - reference).abs().max()) / scale
        if on_gpu:
            torch.cuda.synchronize()
        started = time.perf_counter()
        score_texts(fast, architecture, queries, documents, device, a.batch * 4)
        if on_gpu:
            torch.cuda.synchronize()
        seconds = time.perf_counter() - started
        tolerance = INFERENCE_TOLERANCE["dry" if a.dry_run else "full"]
        rows.append({"task": "rerank" if architecture == "cross" else "encode", "model": label, "weights": weights,
                     "device": torch.cuda.get_device_name() if on_gpu else "CPU", "items": n,
                     "items_per_s": n / seconds, "attention": getattr(ranker_config(fast), "_attn_implementation", None),
                     "max_rel_diff": diff, "tolerance": tolerance, "passed": diff <= tolerance,
                     "why": "" if diff <= tolerance else f"scores differ by {diff:.3g} of the largest score"})
        ranker.to("cpu")
    return rows


def score_texts(ranker, architecture: str, queries: list[str], documents: list[str], device: str, batch: int):
    """Cross: a score per (query, document) pair; dense: the document vectors' first coordinates (what encoding
    gives, compared element by element)."""
    import torch

    from ssft.data.examples import RankerCollator

    out = []
    with torch.inference_mode():
        for start in range(0, len(queries), batch):
            items = [{"query": q, "documents": [d]} for q, d in
                     zip(queries[start : start + batch], documents[start : start + batch])]
            inputs = {k: (v.to(device) if hasattr(v, "to") else v) for k, v in RankerCollator(ranker)(items).items()}
            if architecture == "cross":
                inputs.pop("group_size")
                out.append(ranker(**inputs).float().reshape(-1).cpu())
            else:
                vectors = ranker.encode_tokens(inputs["d_input_ids"], inputs["d_attention_mask"], "document").vectors
                out.append(vectors.float().reshape(len(items), -1)[:, :8].reshape(-1).cpu())
    return torch.cat(out)


# ---------------------------------------------------------------------------------------------- 3. faiss
def faiss_check(a) -> dict:
    """An exact inner-product index on the GPU against the CPU one (same top-k), or faiss-cpu timed."""
    try:
        import faiss
        import numpy as np
    except ImportError:
        return {"task": "faiss", "passed": False, "why": "faiss is not installed", "gpu": False}
    n, d, k = (2000, 32, 10) if a.dry_run else (1_000_000, 768, 100)
    queries = 16 if a.dry_run else 1000
    rng = np.random.default_rng(0)
    xb = rng.standard_normal((n, d), dtype=np.float32)
    xq = rng.standard_normal((queries, d), dtype=np.float32)
    cpu = faiss.IndexFlatIP(d)
    cpu.add(xb)
    started = time.perf_counter()
    _, cpu_ids = cpu.search(xq, k)
    cpu_seconds = time.perf_counter() - started
    row = {"task": "faiss", "vectors": n, "dim": d, "queries": queries, "k": k, "threads": faiss.omp_get_max_threads(),
           "cpu_queries_per_s": queries / cpu_seconds, "gpu": False}
    gpus = faiss.get_num_gpus() if hasattr(faiss, "get_num_gpus") else 0
    if gpus < 1 or not hasattr(faiss, "StandardGpuResources"):
        return {**row, "passed": True, "why": "", "note": "this faiss has no GPU support (faiss-cpu): timed on the CPU"}
    gpu = faiss.index_cpu_to_gpu(faiss.StandardGpuResources(), 0, cpu)
    gpu.search(xq[:8], k)  # warm-up
    started = time.perf_counter()
    _, gpu_ids = gpu.search(xq, k)
    gpu_seconds = time.perf_counter() - started
    same = float((gpu_ids == cpu_ids).mean())
    return {**row, "gpu": True, "gpu_queries_per_s": queries / gpu_seconds, "same_ids": same,
            "passed": same >= 0.999, "why": "" if same >= 0.999 else f"GPU ids equal the CPU ids for {same:.1%}"}


# ---------------------------------------------------------------------------------------------- 4. DDP
DDP_ITEMS = [("vitamin d bones", "vitamin d and bone health", ["statin drugs lower cholesterol"]),
             ("fish oil omega", "omega three fatty acids in fish oil", ["added sugar and diabetes"]),
             ("green tea", "green tea and blood pressure", ["salt intake and stroke"]),
             ("coffee liver", "coffee consumption and liver disease", ["sleep duration and memory"])]


def _ddp_items(lo: int, hi: int) -> list[dict]:
    return [{"query": q, "documents": [p, *negs]} for q, p, negs in DDP_ITEMS[lo:hi]]


def _dense_loss(folder: str, items: list[dict], device: str) -> float:
    import torch

    from ssft.config.registry import LOSSES
    from ssft.data.examples import RankerCollator
    from ssft.training.objectives import objective_for

    ranker = build_ranker(Path(folder), "dense", "full", 32).to(device).eval()
    batch = {k: (v.to(device) if hasattr(v, "to") else v) for k, v in RankerCollator(ranker)(items).items()}
    with torch.no_grad():
        loss, _ = objective_for(LOSSES.get("contrastive")(), None).compute(ranker, ranker, batch)
    return float(loss)


def _ddp_worker(rank: int, world: int, init_file: str, folder: str, out_file: str, use_gpu: bool) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    gpus = torch.cuda.device_count() if use_gpu else 0
    backend = "nccl" if gpus >= world else "gloo"  # one GPU shared by two processes: NCCL refuses, gloo gathers
    device = f"cuda:{rank % gpus}" if gpus else "cpu"
    if gpus:
        torch.cuda.set_device(device)
    dist.init_process_group(backend, init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        share = len(DDP_ITEMS) // world
        loss = torch.tensor(_dense_loss(folder, _ddp_items(rank * share, (rank + 1) * share), device), device=device)
        dist.all_reduce(loss)  # the dense loss is weighted so that the mean over processes is the global loss
        if rank == 0:
            Path(out_file).write_text(json.dumps({"loss": float(loss) / world, "backend": backend, "device": device}))
    finally:
        dist.destroy_process_group()


def ddp_check(a, scratch: Path) -> dict:
    import torch
    import torch.multiprocessing as mp

    use_gpu = torch.cuda.is_available() and not a.dry_run
    label, hub_id, shape = (MODELS_DRY if a.dry_run else MODELS_FULL)[-1]
    folder, _ = model_folder(scratch, label, hub_id, shape, a.tokenizer)
    out = scratch / "ddp.json"
    mp.spawn(_ddp_worker, args=(2, str(scratch / "ddp-init"), str(folder), str(out), use_gpu), nprocs=2, join=True)
    two = json.loads(out.read_text())
    one = _dense_loss(str(folder), _ddp_items(0, len(DDP_ITEMS)), "cuda" if use_gpu else "cpu")
    diff = abs(two["loss"] - one)
    ok = diff <= 1e-4 * max(1.0, abs(one))
    return {"task": "ddp", "processes": 2, "backend": two["backend"], "device": two["device"], "loss_2_processes":
            two["loss"], "loss_1_process": one, "diff": diff, "passed": ok,
            "why": "" if ok else f"2-process loss differs from 1-process loss by {diff:.3g}"}


# ---------------------------------------------------------------------------------------------- report
def table(results: dict) -> str:
    lines = [f"gpu_check on {results['device']} (commit {results['commit']}, {results['date']}"
             f"{', dry run: tiny models on the CPU' if results['dry_run'] else ''})", "",
             "| model | weights | architecture | method | precision | first loss (CPU fp32) | last loss | tokens/s | "
             "MFU | scaler | passed |", "|---|---|---|---|---|---|---|---:|---:|---|---|"]
    for r in results["train"]:
        if "error" in r:
            lines.append(f"| – | – | – | – | {r['precision']} | – | – | – | – | – | no: {r['error']} |")
            continue
        ref = f"{r['cpu_reference'][0]:.4f}" if r.get("cpu_reference") else "–"
        mfu = f"{100 * r['mfu']:.1f} %" if r.get("mfu") else "–"
        tps = f"{r['tokens_per_s']:,.0f}" if r.get("tokens_per_s") else "–"
        lines.append(f"| {r['model']} | {r['weights']} | {r['architecture']} | {r['method']} | {r['precision']} | "
                     f"{r['losses'][0]:.4f} ({ref}) | {r['losses'][-1]:.4f} | {tps} | {mfu} | "
                     f"{'yes' if r['grad_scaler'] else 'no'} | {'yes' if r['passed'] else 'no: ' + r['why']} |")
    lines += ["", "| check | result | passed |", "|---|---|---|"]
    for r in results["inference"]:
        lines.append(f"| {r['task']} ({r['model']}, bf16 weights, attention {r['attention']}) | {r['items_per_s']:,.0f} "
                     f"items/s, max diff {r['max_rel_diff']:.2g} of the largest score | "
                     f"{'yes' if r['passed'] else 'no: ' + r['why']} |")
    f = results["faiss"]
    if "cpu_queries_per_s" in f:
        text = (f"exact IP, {f['vectors']:,} x {f['dim']}, k {f['k']}: CPU {f['cpu_queries_per_s']:,.0f} q/s on "
                f"{f['threads']} threads" + (f", GPU {f['gpu_queries_per_s']:,.0f} q/s, same ids {f['same_ids']:.1%}"
                                             if f["gpu"] else f"; {f.get('note', '')}"))
    else:
        text = f["why"]
    lines.append(f"| faiss | {text} | {'yes' if f['passed'] else 'no: ' + f['why']} |")
    d = results["ddp"]
    lines.append(f"| ddp ({d['processes']} processes, {d['backend']}, {d['device']}) | loss {d['loss_2_processes']:.6f} "
                 f"vs 1 process {d['loss_1_process']:.6f} | {'yes' if d['passed'] else 'no: ' + d['why']} |")
    return "\n".join(lines)


def report(path: Path, write: bool, notes: Path | None = None) -> int:
    """The table of a saved result (a device's run brought back), and with ``write`` BENCHMARKS.md § gpu_check."""
    from report import with_notes, write_section

    results = json.loads(path.read_text())
    s = results["settings"]
    train = [r for r in results["train"] if "error" not in r]
    mfu = [r["mfu"] for r in train if r.get("mfu")]
    checks = [*results["train"], *results["inference"], results["faiss"], results["ddp"]]
    lines = [f"## The GPU path: mixed-precision training, inference, faiss and a gathered loss on an {results['device']}",
             "", f"`python benchmarks/gpu_check.py --precisions {','.join(sorted({r['precision'] for r in results['train']}))}"
             f" --steps {s['steps']} --batch {s['batch']} --seq-len {s['seq_len']}` on the device (one "
             f"{results['device']}, 16 host cores), the tree of commit {results['commit']} with the fixes below; "
             f"result: `{path.as_posix()}`; `python benchmarks/gpu_check.py --report {path.as_posix()} --write "
             "[--notes …]` wrote this section. Random weights of each model's shape (the pip packages of the weights "
             "are not on the device; speed does not depend on them); dropout off; first loss against a float32 "
             "reference of the same batch computed on the host's CPU.", "", table(results), "",
             f"{sum(c['passed'] for c in checks)} of {len(checks)} checks passed in {results['seconds']:.0f} s."]
    if mfu:
        target = results.get("mfu_target", {})
        lines += ["", f"Model FLOP utilisation {100 * min(mfu):.1f}–{100 * max(mfu):.1f} % of the card's dense bf16 peak"
                  + (f"; BERT-base-shaped full fine-tuning {100 * target['measured']:.1f} % against the "
                     f"{100 * target['target']:.0f} % target: {'met' if target['met'] else 'missed'}" if target else "")
                  + f" (batch {s['batch']} × {s['seq_len']} tokens, eager PyTorch, one process)."]
    body = with_notes("\n".join(lines), notes)
    print(body)
    if write:
        write_section("gpu_check", body)
    return 0


def commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dry-run", action="store_true", help="tiny models on the CPU (what CI runs)")
    p.add_argument("--steps", type=int, default=None, help="training steps a configuration (default 30; dry run 12)")
    p.add_argument("--batch", type=int, default=None, help="sequences a step (default 32; dry run 8)")
    p.add_argument("--seq-len", type=int, default=None, help="tokens a document (default 256; dry run 32)")
    p.add_argument("--warmup", type=int, default=None, help="steps before the timing starts (default 5; dry run 2)")
    p.add_argument("--learning-rate", type=float, default=None, help="default 2e-4 (dry run 3e-3)")
    p.add_argument("--peak-tflops", type=float, help="the device's dense peak for the precision (default: a table)")
    p.add_argument("--precisions", default="bf16,fp16", help="mixed precisions to train in (default bf16,fp16)")
    p.add_argument("--tokenizer", help="a tokenizer folder for the random models where the all-MiniLM-L6-v2 package "
                   "is not installed (its tokenizer files suffice)")
    p.add_argument("--output", default=str(ROOT / "results" / "gpu_check.json"), help="where the JSON goes")
    p.add_argument("--worker", choices=("train",), help=argparse.SUPPRESS)
    p.add_argument("--precision", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    p.add_argument("--scratch", help=argparse.SUPPRESS)
    p.add_argument("--report", metavar="JSON", help="print (with --write: BENCHMARKS.md § gpu_check) the table of a "
                   "saved result instead of running the check")
    p.add_argument("--write", action="store_true", help="with --report: write BENCHMARKS.md § gpu_check")
    p.add_argument("--notes", type=Path, help="with --report: a Markdown file of readings appended to the section")
    a = p.parse_args(argv)
    if a.report:
        return report(Path(a.report), a.write, a.notes)
    dry = {"steps": 12, "batch": 8, "seq_len": 32, "warmup": 2, "learning_rate": 3e-3}
    full = {"steps": 30, "batch": 32, "seq_len": 256, "warmup": 5, "learning_rate": 2e-4}
    for key, value in (dry if a.dry_run else full).items():
        if getattr(a, key) is None:
            setattr(a, key, value)
    if a.batch % 4:
        p.error("--batch: the cross-encoder takes 4 pairs a query, so a multiple of 4")
    if a.worker == "train":
        return train_worker(a)

    import torch

    started = time.time()
    results = {"device": torch.cuda.get_device_name() if torch.cuda.is_available() and not a.dry_run else "CPU",
               "commit": commit(), "date": time.strftime("%Y-%m-%d"), "dry_run": a.dry_run,
               "settings": {k: getattr(a, k) for k in ("steps", "batch", "seq_len", "warmup", "learning_rate")}}
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        refs = cpu_references(a, scratch)
        print(f"CPU fp32 references: {time.time() - started:.0f} s", flush=True)
        results["train"] = []
        for precision in [x for x in a.precisions.split(",") if x]:
            rows = launch_training(a, precision, scratch)
            results["train"] += [judge_training(r, refs) for r in rows]
            print(f"{precision} training: {time.time() - started:.0f} s", flush=True)
        results["inference"] = inference_check(a, scratch)
        results["faiss"] = faiss_check(a)
        results["ddp"] = ddp_check(a, scratch)
    results["seconds"] = round(time.time() - started, 1)
    checks = [*results["train"], *results["inference"], results["faiss"], results["ddp"]]
    results["passed"] = all(c["passed"] for c in checks)
    bert_base = [r for r in results["train"] if r.get("model") == "mpnet-base" and r.get("method") == "full"
                 and r.get("precision") == "bf16" and r.get("mfu")]
    if bert_base:
        results["mfu_target"] = {"target": MFU_TARGET, "measured": bert_base[0]["mfu"],
                                 "met": bert_base[0]["mfu"] >= MFU_TARGET}
    output = Path(a.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(results, indent=1) + "\n")
    print(table(results))
    print(f"\n{sum(c['passed'] for c in checks)} passed, {sum(not c['passed'] for c in checks)} failed "
          f"({results['seconds']:.0f} s) -> {output}")
    return 0 if results["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())

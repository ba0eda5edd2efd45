"""Benchmark: dense retrieval on SciFact (train → test, full retrieval of all 5,183 abstracts, faiss exact).

    SSFT_DATA_HOME=../shared/data python benchmarks/dense_daft.py [--parts a0,b1,...] [--out /tmp/dense_bench]

(a) homogeneous all-MiniLM-L6-v2 (one shared backbone, mean pooling): a0 zero-shot, a1 fine-tuned (Eq. 5,
    in-batch + 1 BM25 hard negative per query).
(b) heterogeneous: query tower = the first 2 layers of all-MiniLM-L6-v2 (384-d), document tower =
    all-mpnet-base-v2 (768-d), shared projection 768 + L2 norm, scale 20:
    b0 before training; b1 DAFT (stage 1 aligns the query tower against the frozen document tower, KL
    after every epoch, then stage 2 trains both); b2 without DAFT (both towers from the first step, as many
    steps as DAFT's stage 2). Loss curves and the collapse monitor's values are recorded for b1 and b2.
    b3: DAFT's stage 1 alone at --align-lr; b4 / b5: b1 / b2 at --align-lr, both scored by full retrieval.
    Stage-2 / no-DAFT models need the corpus re-encoded by the trained MPNet tower (slow on CPU):
    ``--eval-trained-documents`` turns that on; otherwise those rows report the collapse monitor only, and
    part b1eval scores b1's saved model later. Every part runs by default (``--parts`` picks some).
lat: ms per query of the query tower vs the document tower on the same 256 test queries, batch 1 and 32,
    1 CPU thread, median of 5 repeats.
pca: PCA of 200 test queries / 200 documents: before, after alignment, after fine-tuning (and without DAFT).

Every part saves its result under --out and is skipped when the result exists (resumable). The frozen MPNet
document tower's corpus vectors come from benchmarks/dense_doc_cache.py (--doc-cache). Writes the
'dense_daft' section of BENCHMARKS.md from whatever parts have results.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from report import add_notes_option, with_notes, write_section  # noqa: E402

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
MPNET = "sentence-transformers/all-mpnet-base-v2"
METRICS = ["nDCG@10", "R@100"]
# every part; each is skipped once its result exists
PARTS = ("a0", "a1", "b0", "b1", "b1eval", "b2", "b3", "b4", "b5", "lat", "pca")
logger = logging.getLogger("dense_daft")


def model_config(hetero: bool, doc_length: int):
    from ssft.config.recipe import ModelConfig

    if hetero:
        return ModelConfig(architecture="dense", name=MINILM, query_layers=2, document_name=MPNET, projection_dim=768,
                           pooling="mean", max_length=doc_length, query_max_length=64)
    return ModelConfig(architecture="dense", name=MINILM, pooling="mean", max_length=doc_length, query_max_length=64)


def build(hetero: bool, doc_length: int, seed: int = 42):
    import torch

    from ssft.config.registry import MODELS

    torch.manual_seed(seed)
    return MODELS.get("dense").build(model_config(hetero, doc_length), "full", {})


def evaluate(model, dataset, qrels) -> dict:
    from ssft.eval.metrics import evaluate_run
    from ssft.eval.retrieve import retrieve

    started = time.time()
    run = retrieve(model, dataset, {q: dataset.queries[q] for q in qrels}, 100, 32)
    out = evaluate_run(qrels, run, METRICS)[0]
    out["eval_seconds"] = round(time.time() - started, 1)
    return out


def training_set(dataset, n_queries: int, seed: int):
    from ssft.data.examples import TrainingGroups, build_examples, subsample_queries
    from ssft.firststage.bm25 import BM25

    qrels = subsample_queries(dataset.qrels("train"), n_queries, seed)
    negatives = BM25(dataset).search({q: dataset.queries[q] for q in qrels}, 100)
    return TrainingGroups(build_examples(qrels, list(dataset.corpus), negatives, 1, None, seed), dataset, 1), qrels


def train(model, train_set, out: Path, epochs: int, batch: int, lr: float, callbacks: list, seed: int = 42,
          logging_steps: int = 5, warmup_steps: int = 5):
    from transformers import TrainingArguments

    from ssft.data.examples import RankerCollator
    from ssft.losses import ContrastiveLoss
    from ssft.training.trainer import RankingTrainer

    args = TrainingArguments(output_dir=str(out), num_train_epochs=epochs, per_device_train_batch_size=batch, learning_rate=lr,
                             lr_scheduler_type="constant_with_warmup", warmup_steps=warmup_steps, logging_steps=logging_steps,
                             report_to=[], save_strategy="no", eval_strategy="no", remove_unused_columns=False, disable_tqdm=True,
                             use_cpu=True, seed=seed, dataloader_pin_memory=False)
    trainer = RankingTrainer(model=model, args=args, train_dataset=train_set, data_collator=RankerCollator(model),
                             loss=ContrastiveLoss(), head_learning_rate=None, callbacks=callbacks)
    started = time.time()
    trainer.train()
    model.eval()
    losses = [{"step": e["step"], "loss": e["loss"]} for e in trainer.state.log_history if "loss" in e]
    return {"train_seconds": round(time.time() - started, 1), "steps": trainer.state.global_step, "loss_curve": losses}


def saved(out: Path, name: str):
    path = out / f"{name}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def save(out: Path, name: str, obj) -> None:
    from ssft.core.io import atomic_write_json

    atomic_write_json(out / f"{name}.json", obj)


def collapse_summary(monitor) -> list[dict]:
    return [{"step": h["step"], "query_rank": round(h["query"]["effective_rank"], 2), "query_var": h["query"]["total_variance"],
             "doc_rank": round(h["document"]["effective_rank"], 2), "doc_var": h["document"]["total_variance"],
             "mean_cos": round(h["mean_query_document_cosine"], 3)} for h in monitor.history]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--parts", default=",".join(PARTS))
    parser.add_argument("--out", type=Path, default=Path("/tmp/dense_bench"))
    parser.add_argument("--data", default="scifact", help="BEIR dataset with train and test qrels (a tiny one for a dry run)")
    parser.add_argument("--train-queries", type=int, default=300)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--doc-length-a", type=int, default=256)
    parser.add_argument("--doc-length-b", type=int, default=128)
    parser.add_argument("--doc-cache", type=Path, default=Path("/tmp/dense_work/mpnet_scifact_128.pt"))
    parser.add_argument("--align-epochs", type=int, default=3)
    parser.add_argument("--delta", type=float, default=250.0)
    parser.add_argument("--align-lr", type=float, default=2e-4, help="learning rate of parts b3 (stage 1 alone), b4 and b5")
    parser.add_argument("--eval-trained-documents", action="store_true")
    parser.add_argument("--report-only", action="store_true")
    add_notes_option(parser)
    ns = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    ns.out.mkdir(parents=True, exist_ok=True)
    parts = set(ns.parts.split(","))
    if not ns.report_only:
        run_parts(ns, parts)
    write_report(ns)


def run_parts(ns, parts: set[str]) -> None:
    import torch
    from dense_doc_cache import load_into

    from ssft.data.beir import load_dataset
    from ssft.training.callbacks.collapse_monitor import CollapseMonitorCallback
    from ssft.training.callbacks.daft import DaftCallback

    dataset = load_dataset(ns.data)
    test = dataset.qrels("test")
    train_set, train_qrels = training_set(dataset, ns.train_queries, 0)
    # SciFact has no dev split: the train queries not trained on stand in for validation (KL, collapse monitor)
    held_out = {q: r for q, r in dataset.qrels("train").items() if q not in train_qrels}

    def monitor():
        m = CollapseMonitorCallback(every_steps=10, sample_size=200)
        m.setup(dataset=dataset, validation_qrels=held_out)
        return m

    if "a0" in parts and saved(ns.out, "a0") is None:
        model = build(False, ns.doc_length_a).requires_grad_(False)
        save(ns.out, "a0", evaluate(model, dataset, test))
    if "a1" in parts and saved(ns.out, "a1") is None:
        model = build(False, ns.doc_length_a)
        mon = monitor()
        info = train(model, train_set, ns.out / "a1", 1, ns.batch, 2e-5, [mon])
        model.requires_grad_(False)
        save(ns.out, "a1", {**info, **evaluate(model, dataset, test), "collapse": collapse_summary(mon)})

    def hetero():
        model = build(True, ns.doc_length_b)
        model.document_backbone.requires_grad_(False)
        n = load_into(model, dataset, ns.doc_cache)
        model.document_backbone.requires_grad_(True)
        logger.info("frozen MPNet vectors of %d documents loaded from %s", n, ns.doc_cache)
        return model

    def eval_frozen_docs(model) -> dict:
        """Retrieval with the document tower frozen (its cached vectors): stage-1 and untrained models."""
        trainable = [p for p in model.parameters() if p.requires_grad]
        model.requires_grad_(False)
        os.environ["SSFT_EMBEDDING_CACHE"] = "0"  # the in-memory MPNet vectors are the cache here
        try:
            return evaluate(model, dataset, test)
        finally:
            os.environ.pop("SSFT_EMBEDDING_CACHE", None)
            for p in trainable:
                p.requires_grad_(True)

    if "b0" in parts and saved(ns.out, "b0") is None and ns.doc_cache.is_file():
        model = hetero()
        mon = monitor()
        model.requires_grad_(False)
        mon.measure(model, 0)
        save(ns.out, "b0", {**eval_frozen_docs(model), "collapse": collapse_summary(mon)})

    def daft_run(name: str, lr: float, score: bool) -> None:
        """Algorithm 1: stage 1 (query tower against the frozen MPNet vectors, evaluated after each epoch), then
        one epoch of both towers; ``score``: full retrieval with the corpus re-encoded by the trained MPNet."""
        model = hetero()
        mon = monitor()
        stage1_evals = []

        from transformers import TrainerCallback

        class AlignmentProbe(TrainerCallback):  # runs before DAFT's check: evaluates every stage-1 epoch
            def on_epoch_end(self, args, state, control, model=None, **kwargs):
                if daft.stage == "alignment":
                    stage1_evals.append({"epoch": state.epoch, **eval_frozen_docs(model)})

        daft = DaftCallback(delta=ns.delta, patience=2, finetune_epochs=1, max_alignment_checks=ns.align_epochs)
        daft.setup(dataset=dataset, validation_qrels=held_out)
        info = train(model, train_set, ns.out / name, ns.align_epochs + 1, ns.batch, lr, [AlignmentProbe(), daft, mon])
        result = {**info, "lr": lr, "kl_history": daft.history, "stage_changes": daft.stage_changes,
                  "stage1_evals": stage1_evals, "collapse": collapse_summary(mon), "collapse_warnings": mon.warnings}
        if score:
            model.requires_grad_(False)
            result.update(evaluate(model, dataset, test))
        save(ns.out, name, result)
        torch.save({k: v for k, v in model.state_dict().items()}, ns.out / f"{name}_state.pt")

    def joint_run(name: str, lr: float, score: bool) -> None:
        """Both towers from the first step, as many steps as DAFT's stage 2."""
        model = build(True, ns.doc_length_b)
        mon = monitor()
        epochs = 1
        info = train(model, train_set, ns.out / name, epochs, ns.batch, lr, [mon])
        result = {**info, "lr": lr, "collapse": collapse_summary(mon), "collapse_warnings": mon.warnings,
                  "note": f"both towers from step 0 for {epochs} epoch (DAFT's stage 2 length)"}
        if score:
            model.requires_grad_(False)
            result.update(evaluate(model, dataset, test))
        save(ns.out, name, result)
        torch.save({k: v for k, v in model.state_dict().items()}, ns.out / f"{name}_state.pt")

    if "b1" in parts and saved(ns.out, "b1") is None and ns.doc_cache.is_file():
        daft_run("b1", 2e-5, ns.eval_trained_documents)
    if "b4" in parts and saved(ns.out, "b4") is None and ns.doc_cache.is_file():
        daft_run("b4", ns.align_lr, True)  # b1 at b3's learning rate, stage 2 scored
    if "b5" in parts and saved(ns.out, "b5") is None:
        joint_run("b5", ns.align_lr, True)  # b2 at b3's learning rate

    b1 = saved(ns.out, "b1")
    if "b1eval" in parts and b1 is not None and "nDCG@10" not in b1 and (ns.out / "b1_state.pt").is_file():
        # b1 trained without --eval-trained-documents: score its saved stage-2 model now (re-encodes the corpus)
        model = build(True, ns.doc_length_b)
        model.load_state_dict(torch.load(ns.out / "b1_state.pt"))
        model.requires_grad_(False)
        save(ns.out, "b1", {**b1, **evaluate(model, dataset, test)})

    if "b3" in parts and saved(ns.out, "b3") is None and ns.doc_cache.is_file():
        # DAFT's stage 1 alone at a higher learning rate: does the alignment (KL, retrieval) move faster?
        model = hetero()
        stage1_evals = []

        from transformers import TrainerCallback

        class Probe(TrainerCallback):
            def on_epoch_end(self, args, state, control, model=None, **kwargs):
                stage1_evals.append({"epoch": state.epoch, **eval_frozen_docs(model)})

        daft = DaftCallback(delta=ns.delta, patience=ns.align_epochs, finetune_epochs=1, max_alignment_checks=ns.align_epochs + 1)
        daft.setup(dataset=dataset, validation_qrels=held_out)
        info = train(model, train_set, ns.out / "b3", ns.align_epochs, ns.batch, ns.align_lr, [Probe(), daft])
        save(ns.out, "b3", {**info, "lr": ns.align_lr, "kl_history": daft.history, "stage1_evals": stage1_evals})

    if "b2" in parts and saved(ns.out, "b2") is None:  # trains both towers from the start: no frozen vectors needed
        joint_run("b2", 2e-5, ns.eval_trained_documents)

    if "lat" in parts and saved(ns.out, "lat") is None:
        from ssft.eval.latency import measure_latency

        model = build(True, ns.doc_length_b).requires_grad_(False)
        queries = [dataset.queries[q] for q in sorted(test)]
        homo = build(False, ns.doc_length_a).requires_grad_(False)
        query_tower, document_tower = measure_latency(model, queries, (1, 32), 5, 1, ["query", "document"])
        # the 6-layer homogeneous MiniLM timed in the same interleaved way against the 2-layer tower
        _, homo_tower = measure_latency(_Pair(model, homo), queries, (1, 32), 5, 1, ["query", "document"])
        save(ns.out, "lat", {"query tower (MiniLM-L6, 2 layers)": query_tower,
                             "document tower (MPNet-base) on queries": document_tower,
                             "MiniLM-L6 (6 layers, homogeneous)": homo_tower})

    if "pca" in parts and not (ns.out / "pca.png").is_file() and ns.doc_cache.is_file():
        pca(ns, dataset, test, hetero)


class _Pair:
    """Times model ``a``'s query tower as 'query' and model ``b``'s query tower as 'document' (interleaved)."""

    def __init__(self, a, b):
        self.a, self.b = a, b
        self.training = False
        self.spec = a.spec
        self.tokenizer = a.tokenizer
        self.document_tokenizer = b.tokenizer

    def tokenize_queries(self, texts):
        return self.a.tokenize_queries(texts)

    def encode_tokens(self, input_ids, attention_mask, tower):
        return (self.a if tower == "query" else self.b).encode_tokens(input_ids, attention_mask, "query")

    def _to_device(self, batch):
        return batch

    def parameters(self):
        return self.a.parameters()

    def eval(self):
        return self

    def train(self, mode=True):
        return self


def pca(ns, dataset, test, hetero) -> None:
    import random

    import torch

    from ssft.analysis.embeddings import encode_sample, plot_pca

    rng = random.Random(0)
    queries = [dataset.queries[q] for q in rng.sample(sorted(test), min(200, len(test)))]
    documents = [dataset.corpus[d].full_text for d in rng.sample(sorted(dataset.corpus), min(200, len(dataset.corpus)))]
    panels = []
    model = hetero().requires_grad_(False)
    panels.append(("(a) before training", *encode_sample(model, queries, documents)))
    for name, title in (("b1", "(b) DAFT (lr 2e-5): aligned + fine-tuned"), ("b2", "(c) fine-tuned without DAFT (lr 2e-5)"),
                        ("b4", f"(d) DAFT (lr {ns.align_lr:g}): aligned + fine-tuned"),
                        ("b5", f"(e) fine-tuned without DAFT (lr {ns.align_lr:g})")):
        state = ns.out / f"{name}_state.pt"
        if state.is_file():
            m = build(True, ns.doc_length_b)
            m.load_state_dict(torch.load(state))
            m.requires_grad_(False)
            panels.append((title, *encode_sample(m, queries, documents)))
    plot_pca(panels, ns.out / "pca.png")
    figure = ROOT / "benchmarks" / "figures" / "dense_pca.png"
    figure.parent.mkdir(parents=True, exist_ok=True)
    figure.write_bytes((ns.out / "pca.png").read_bytes())


def write_report(ns) -> None:

    r = {name: saved(ns.out, name) for name in ("a0", "a1", "b0", "b1", "b2", "lat")}
    lines = ["## Dense retrieval on SciFact: homogeneous MiniLM, heterogeneous MiniLM(2 layers)/MPNet with and without DAFT", "",
             f"`python benchmarks/dense_doc_cache.py --model {MPNET} --data scifact --max-length {ns.doc_length_b} "
             f"--out {ns.doc_cache}` (the frozen MPNet corpus vectors), then "
             f"`python benchmarks/dense_daft.py --train-queries {ns.train_queries} --batch {ns.batch}"
             + (f" --notes {ns.notes}" if ns.notes else "") + "` (all parts; CPU, 2 cores shared with "
             "other jobs; full retrieval of all 5,183 abstracts with faiss exact inner product; all 300 test queries; "
             f"training on {ns.train_queries} SciFact train queries (seed 0), 1 BM25 hard negative each + in-batch negatives, "
             f"Eq. 5 with τ = 1 on 20 × cosine, lr 2e-5 (b3, b4, b5: {ns.align_lr:g}) constant after 5 warm-up steps, seed 42). "
             "The train queries not trained on "
             "stand in for SciFact's missing dev split (DAFT's KL, the collapse monitor's query sample).", ""]
    lines += ["| model | documents ≤ tokens | train | nDCG@10 | R@100 |", "|---|---|---|---|---|"]

    def row(label, res, tokens, how):
        if res is None:
            lines.append(f"| {label} | {tokens} | {how} | not run | not run |")
        elif "nDCG@10" in res:
            lines.append(f"| {label} | {tokens} | {how} | {res['nDCG@10']:.3f} | {res['R@100']:.3f} |")
        else:
            lines.append(f"| {label} | {tokens} | {how} | not evaluated (corpus re-encoding by the trained MPNet skipped) | — |")

    row("MiniLM-L6 zero-shot (a0)", r["a0"], ns.doc_length_a, "—")
    row("MiniLM-L6 fine-tuned (a1)", r["a1"], ns.doc_length_a, f"1 epoch, {r['a1']['steps'] if r['a1'] else '?'} steps")
    row("hetero, before training (b0)", r["b0"], ns.doc_length_b, "—")
    if r["b1"]:
        for e in r["b1"]["stage1_evals"]:
            row(f"hetero + DAFT after alignment epoch {e['epoch']:.0f} (b1)", e, ns.doc_length_b, "query tower only")
    row("hetero + DAFT, after stage 2 (b1)", r["b1"], ns.doc_length_b, "alignment + 1 epoch both towers")
    row("hetero without DAFT (b2)", r["b2"], ns.doc_length_b, "1 epoch both towers")
    for key in ("b4", "b5"):
        res = saved(ns.out, key)
        if res is None:
            continue
        if key == "b4":
            for e in res["stage1_evals"]:
                row(f"hetero + DAFT at lr {res['lr']:g} after alignment epoch {e['epoch']:.0f} (b4)", e, ns.doc_length_b,
                    "query tower only")
            row(f"hetero + DAFT at lr {res['lr']:g}, after stage 2 (b4)", res, ns.doc_length_b, "alignment + 1 epoch both towers")
        else:
            row(f"hetero without DAFT at lr {res['lr']:g} (b5)", res, ns.doc_length_b, "1 epoch both towers")
    b3 = saved(ns.out, "b3")
    if b3:
        for e in b3["stage1_evals"]:
            row(f"hetero, DAFT stage 1 only at lr {b3['lr']:g}, epoch {e['epoch']:.0f} (b3)", e, ns.doc_length_b,
                "query tower only")
    lines.append("")
    if b3:
        lines.append(f"b3 (stage 1 alone, lr {b3['lr']:g}): KL per check " + ", ".join(f"{h['kl']:.0f}" for h in b3["kl_history"])
                     + "; loss every 5 steps " + ", ".join(f"{x['loss']:.2f}" for x in b3["loss_curve"]) + ".")
    if r["b1"]:
        lines.append("DAFT alignment, 1-NN KL(doc ‖ query) (Eq. 9, a = 768, on the held-out train queries) per check: "
                     + ", ".join(f"{h['kl']:.0f}" for h in r["b1"]["kl_history"]) + ".")
        lines.append("Stage changes: "
                     + "; ".join(f"step {c['step']}: {c['stage']} — {c['reason']}" for c in r["b1"]["stage_changes"]) + ".")
        lines.append("")
    r["b4"], r["b5"] = saved(ns.out, "b4"), saved(ns.out, "b5")
    for key, label in (("a1", "a1 homogeneous"), ("b1", "b1 DAFT"), ("b2", "b2 no DAFT"),
                       ("b4", f"b4 DAFT at lr {ns.align_lr:g}"), ("b5", f"b5 no DAFT at lr {ns.align_lr:g}")):
        res = r[key]
        if not res:
            continue
        curve = ", ".join(f"{x['loss']:.2f}" for x in res["loss_curve"])
        lines.append(f"- {label}: loss every 5 steps {curve} ({res['steps']} steps, {res['train_seconds']:.0f} s)")
        coll = res["collapse"]
        lines.append("  collapse monitor (step: query eff. rank / total var | doc eff. rank / total var | cos of mean vectors): "
                     + "; ".join(f"{c['step']}: {c['query_rank']:.1f}/{c['query_var']:.3f} "
                                 f"| {c['doc_rank']:.1f}/{c['doc_var']:.3f} | {c['mean_cos']:.2f}" for c in coll))
        if res.get("collapse_warnings"):
            lines.append(f"  collapse warnings: {len(res['collapse_warnings'])} (first: {res['collapse_warnings'][0]})")
    if r["lat"]:
        lines += ["",
                  "Query encoding latency, 1 CPU thread, median of 5 passes over 256 test queries "
                  "(ms per query; tokenizer apart):",
                  "",
                  "| encoder | batch 1 encode | batch 1 tokenize | batch 32 encode | batch 32 tokenize |",
                  "|---|---|---|---|---|"]
        for name, v in r["lat"].items():
            b = v["batch_sizes"]
            lines.append(f"| {name} | {b['1']['encode_ms_per_query']:.2f} | {b['1']['tokenize_ms_per_query']:.2f} | "
                         f"{b['32']['encode_ms_per_query']:.2f} | {b['32']['tokenize_ms_per_query']:.2f} |")
    if (ns.out / "pca.png").is_file():
        lines += ["", "PCA of 200 test queries / 200 documents (000 Fig. 5): `benchmarks/figures/dense_pca.png`."]
    write_section("dense_daft", with_notes("\n".join(lines), ns.notes))


if __name__ == "__main__":
    main()

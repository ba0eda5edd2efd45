"""Benchmark: distillation into small query encoders (002, 004) on SciFact and NFCorpus test, full retrieval.

    OMP_NUM_THREADS=1 SSFT_DATA_HOME=../shared/data python benchmarks/distillation.py --out /work/bench-runs/distill

Teacher: all-MiniLM-L6-v2 (6 layers, mean pooling, 20 × cosine), zero-shot. Every student run is
``ssft-train`` on a shipped recipe with overrides (``run_recipe``), its outputs under ``--out/<part>/``:

- ``teacher``: the teacher's own nDCG@10 / R@100 (its corpus index is encoded once, into the on-disk
  embedding cache under ``--out/cache``, and shared by every asymmetric student — they retrieve from it).
- ``query``: query-encoder distillation (002, ``recipes/distill_scifact.yaml``): students of 1, 2 and 3
  teacher layers ([5], [0, 5], [0, 4, 5]: the last layer, first + last, first + last two, after 002 §4),
  trained on query texts only (mean Euclidean distance to the teacher's query embeddings) and served against
  the teacher's unchanged index; on SciFact also [0, 1] (the first two layers, 000's truncation) for contrast.
- ``ablation`` (SciFact, the 2-layer [0, 5] student, ``recipes/embeddistill_scifact.yaml``), 004 Tables 1/3:
  train directly (a symmetric 2-layer dual encoder, contrastive only) → + distill (Eq. 11 on the teacher's
  in-batch scores) → + inherited document embeddings (asymmetric: only the query tower trains) → + query
  embedding matching (Eq. 7); "embedding matching only + inherited documents" is the ``query`` 2-layer row.
- ``latency``: ms per query of the teacher's and each student's query encoder on the same 256 SciFact test
  queries, batch 1 and 32, 1 CPU thread; rounds interleave the models and the speed-up is the median of the
  per-round ratios (``ssft.eval.latency.measure_latency``).

Each part is skipped when its result exists (resumable). Writes the 'distillation' section of BENCHMARKS.md.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

TEACHER = "sentence-transformers/all-MiniLM-L6-v2"
METRICS = ["nDCG@10", "R@100"]
STUDENTS = {1: [5], 2: [0, 5], 3: [0, 4, 5]}
logger = logging.getLogger("distillation")


def _json(path: Path):
    return json.loads(path.read_text()) if path.is_file() else None


def run_student(out: Path, name: str, recipe_file: str, overrides: list[str]) -> dict:
    """One ssft-train run (skipped when its metrics.json exists); returns metrics + run_info essentials."""
    from ssft.config.recipe import load_recipe
    from ssft.pipeline.run import run_recipe

    folder = out / name
    if not (folder / "metrics.json").is_file():
        logger.info("run %s: %s %s", name, recipe_file, " ".join(overrides))
        os.environ["TENSORBOARD_LOGGING_DIR"] = str(folder / "logs")
        recipe = load_recipe(ROOT / "recipes" / recipe_file, [*overrides, f"training.output_dir={folder}",
                                                              "training.report_to=[]", f"eval.metrics=[{','.join(METRICS)}]"])
        run_recipe(recipe, overwrite=True)
    metrics = _json(folder / "metrics.json")
    info = _json(folder / "run_info.json")
    return {**metrics["test"], "bm25": metrics["bm25"], "train_seconds": info["train_seconds"], "train_loss": info["train_loss"],
            "notes": info["notes"]}


def teacher_metrics(out: Path, dataset_name: str, max_length: int, query_max_length: int) -> dict:
    from ssft.core.io import atomic_write_json
    from ssft.data.beir import load_dataset
    from ssft.eval.metrics import evaluate_run
    from ssft.eval.retrieve import retrieve
    from ssft.teachers.dense import load_teacher, teacher_reference

    path = out / f"teacher_{dataset_name}.json"
    if path.is_file():
        return _json(path)
    dataset = load_dataset(dataset_name)
    qrels = dataset.qrels("test")
    teacher = load_teacher(teacher_reference(TEACHER, "mean", max_length, query_max_length))
    started = time.time()
    run = retrieve(teacher.model, dataset, {q: dataset.queries[q] for q in qrels}, 100, 64)
    result = {**evaluate_run(qrels, run, METRICS)[0], "seconds": round(time.time() - started, 1)}
    atomic_write_json(path, result)
    return result


def measure_latencies(out: Path, names: dict[str, Path], rounds: int, repeats: int, doc_length: int) -> dict:
    """{name: {batch: ms}} medians over rounds, and {name: {batch: speed-up}} medians of per-round ratios."""
    import torch

    from ssft.core.io import atomic_write_json
    from ssft.data.beir import load_dataset
    from ssft.eval.latency import measure_latency
    from ssft.models import load_ranker
    from ssft.teachers.dense import load_teacher, teacher_reference

    path = out / "latency.json"
    if path.is_file():
        return _json(path)
    dataset = load_dataset("scifact")
    queries = [dataset.queries[q] for q in sorted(dataset.qrels("test"))]
    models = {"teacher (6 layers)": load_teacher(teacher_reference(TEACHER, "mean", doc_length, 64)).model}
    for name, folder in names.items():
        models[name] = load_ranker(folder / "model")
    per_round: dict[str, list[dict]] = {n: [] for n in models}
    for _ in range(rounds):
        for name, model in models.items():
            res = measure_latency(model, queries, (1, 32), repeats=repeats, threads=1, tower="query", max_queries=256)
            per_round[name].append({b: v["encode_ms_per_query"] + v["tokenize_ms_per_query"]
                                    for b, v in res["batch_sizes"].items()})
    result = {"rounds": rounds, "repeats": repeats, "threads": torch.get_num_threads(), "ms_per_query": {}, "speedup": {}}
    teacher = per_round["teacher (6 layers)"]
    for name, values in per_round.items():
        result["ms_per_query"][name] = {b: statistics.median(v[b] for v in values) for b in ("1", "32")}
        result["speedup"][name] = {b: statistics.median(t[b] / v[b] for t, v in zip(teacher, values)) for b in ("1", "32")}
    atomic_write_json(path, result)
    return result


def jobs(ns, parts: set[str], datasets: list[str], epochs: dict[str, str]):
    """(kind, key, callable) in priority order: SciFact first (teacher, query-only students, the ablation,
    latency), then NFCorpus, then SciFact's first-two-layers contrast."""
    length = f"model.max_length={ns.doc_length}"
    # the student's token embedding matrix (11.7M of a 2-layer MiniLM's 15.5M weights) stays fixed: its AdamW update
    # dominated a CPU step; every other student weight trains
    frozen_embeddings = "adapter={method: full, freeze_word_embeddings: true}"

    def query(ds: str, name: str, layers: list[int], n_epochs: str | None = None):
        splits = "[train,dev]" if ds == "nfcorpus" else "[train]"
        return lambda: run_student(ns.out, f"query_{ds}_{name}", "distill_scifact.yaml", [
            f"data.dataset={ds}", f"model.query_layers=[{','.join(map(str, layers))}]", f"distillation.query_splits={splits}",
            f"training.num_train_epochs={n_epochs or epochs.get(ds, 4)}", f"training.learning_rate={ns.query_lr}",
            "training.warmup_steps=10", length, frozen_embeddings])

    def ablation(name: str, overrides: list[str]):
        return lambda: run_student(ns.out, f"ablation_{name}", "embeddistill_scifact.yaml", [
            *overrides, f"training.num_train_epochs={ns.ablation_epochs}", length, frozen_embeddings])

    out = []
    for ds in datasets:
        if "teacher" in parts:
            out.append(("teacher", ds, lambda ds=ds: teacher_metrics(ns.out, ds, ns.doc_length, 64)))
        if "query" in parts:
            out += [("query", f"{ds}/{n}", query(ds, str(n), STUDENTS[n])) for n in (2, 1, 3)]
        if ds == "scifact" and "ablation" in parts:
            out += [("ablation", "inherit", ablation("inherit", ["distillation.query_embedding_weight=0"])),
                    ("ablation", "query_matching", ablation("query_matching", [])),
                    ("ablation", "direct", ablation("direct", ["distillation=null"])),  # symmetric, contrastive only
                    ("ablation", "distill", ablation("distill", ["distillation.inherit_documents=false",
                                                                 "distillation.query_embedding_weight=0"]))]
        if ds == "scifact" and "latency" in parts:
            def latency():
                names = {f"student {n} layer{'s' if n > 1 else ''} {STUDENTS[n]}": ns.out / f"query_scifact_{n}"
                         for n in STUDENTS}
                return measure_latencies(ns.out, {k: v for k, v in names.items() if (v / "model").is_dir()},
                                         ns.latency_rounds, ns.latency_repeats, ns.doc_length)
            out.append(("latency", "latency", latency))
    if "scifact" in datasets and "query" in parts:
        out.append(("query", "scifact/2-first", query("scifact", "2first", [0, 1])))
    long_epochs = dict(item.split("=") for item in ns.long_epochs.split(",")) if ns.long_epochs else {}
    for ds in datasets:  # the 2-layer student trained longer
        if "query" in parts and ds in long_epochs:
            out.append(("query", f"{ds}/2-long", query(ds, "2long", STUDENTS[2], long_epochs[ds])))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True, help="persistent folder for every run (and the embedding cache)")
    parser.add_argument("--parts", default="teacher,query,ablation,latency")
    parser.add_argument("--datasets", default="scifact,nfcorpus")
    parser.add_argument("--query-epochs", default="scifact=4,nfcorpus=1", help="query-only epochs per dataset")
    parser.add_argument("--query-lr", type=float, default=2e-4)
    parser.add_argument("--long-epochs", default="scifact=12,nfcorpus=3", help="epochs of the longer 2-layer query-only runs")
    parser.add_argument("--ablation-epochs", type=int, default=1)
    parser.add_argument("--doc-length", type=int, default=128, help="document tokens (teacher index and students)")
    parser.add_argument("--latency-rounds", type=int, default=3)
    parser.add_argument("--latency-repeats", type=int, default=2)
    parser.add_argument("--report-only", action="store_true")
    ns = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    ns.out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("SSFT_CACHE", str(ns.out / "cache"))  # the teacher's corpus index persists with the runs
    import torch

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    parts = set(ns.parts.split(","))
    datasets = ns.datasets.split(",")
    epochs = dict(item.split("=") for item in ns.query_epochs.split(","))
    results: dict = {"teacher": {}, "query": {}, "ablation": {}, "latency": None, "query_epochs": epochs,
                     "long_epochs": ns.long_epochs, "ablation_epochs": ns.ablation_epochs, "query_lr": ns.query_lr,
                     "doc_length": ns.doc_length}
    if not ns.report_only:
        from ssft.core.io import atomic_write_json

        previous = _json(ns.out / "results.json") or {}
        for key in ("teacher", "query", "ablation"):
            results[key].update(previous.get(key, {}))
        results["latency"] = previous.get("latency")
        for job in jobs(ns, parts, datasets, epochs):
            kind, key, run = job
            if kind == "latency" or key not in results[kind]:
                results[kind] = run() if kind == "latency" else {**results[kind], key: run()}
                atomic_write_json(ns.out / "results.json", results)  # after every job: a partial report is possible
                write_report(ns)
    write_report(ns)


def write_report(ns) -> None:
    from report import with_notes, write_section

    r = _json(ns.out / "results.json")
    if r is None:
        return
    lines = ["## Distillation into small query encoders (002, 004) on SciFact and NFCorpus", "",
             f"`python benchmarks/distillation.py --out {ns.out}` (CPU, 1 thread, a machine shared with other jobs; full "
             f"retrieval of the whole corpus, faiss exact inner product, all test queries; documents ≤ {r['doc_length']} tokens, "
             "queries ≤ 64). "
             "Teacher: all-MiniLM-L6-v2 zero-shot (mean pooling, 20 × cosine). Students are cut from the teacher's layers "
             "(002 §2.1: embeddings and pooling kept) and serve against the teacher's unchanged document index "
             "unless said otherwise. "
             f"Query-only students: AdamW lr {r['query_lr']:g} (linear decay), batch 32, 10 warm-up steps, "
             + ", ".join(f"{e} epoch(s) on {d}" for d, e in r["query_epochs"].items())
             + " over the training queries (SciFact train 807 = 104 steps; "
             "NFCorpus train + dev 2,897 = 91 steps; test queries excluded), "
             "loss = mean Euclidean distance to the teacher's query embedding. "
             "Every student keeps the teacher's token embedding matrix fixed "
             "(`adapter: {method: full, freeze_word_embeddings: true}`: "
             "its AdamW update dominated a CPU step; all other weights train). Seed 42, one run each.", ""]
    lines += ["| dataset | query encoder | layers | nDCG@10 | retention | R@100 | train s |", "|---|---|---|---|---|---|---|"]
    for ds, t in r["teacher"].items():
        lines.append(f"| {ds} | teacher | 0-5 | {t['nDCG@10']:.3f} | 100% | {t['R@100']:.3f} | — |")
        for key, res in r["query"].items():
            if not key.startswith(ds + "/"):
                continue
            n = key.split("/")[1]
            layers = [0, 1] if n == "2-first" else STUDENTS[int(n[0])]
            label = {"2-first": "2 (first two)", "2-long": "2"}.get(n, n)
            how = f", {dict(x.split('=') for x in r['long_epochs'].split(','))[ds]} epochs" if n == "2-long" else ""
            lines.append(f"| {ds} | {label}-layer student, query-only distillation{how} | {layers} | "
                         f"{res['nDCG@10']:.3f} | {100 * res['nDCG@10'] / t['nDCG@10']:.1f}% | {res['R@100']:.3f} "
                         f"| {res['train_seconds']:.0f} |")
        bm = next((res["bm25"] for key, res in r["query"].items() if key.startswith(ds + "/")), None)
        if bm:
            lines.append(f"| {ds} | BM25 (for reference) | — | {bm['nDCG@10']:.3f} | — | {bm['R@100']:.3f} | — |")
    if r["ablation"]:
        t = r["teacher"].get("scifact")
        labels = {"direct": "Train student directly (symmetric 2-layer DE, contrastive)",
                  "distill": "+ Distill from teacher (Eq. 11, symmetric)",
                  "inherit": "+ Inherit doc embeddings (asymmetric)",
                  "query_matching": "+ Query embedding matching (Eq. 7)"}
        lines += ["", f"EmbedDistill ablation (004 Tables 1/3) on SciFact test, 2-layer student [0, 5], "
                  "training groups of SciFact train "
                  f"(positive + 1 BM25 negative, in-batch negatives), batch 16, {r['ablation_epochs']} epoch(s) = 58 steps, "
                  "AdamW lr 1e-4, "
                  "loss weights 1:", "",
                  "| method | nDCG@10 | retention | R@100 | train s |", "|---|---|---|---|---|"]
        for key, label in labels.items():
            res = r["ablation"].get(key)
            if res:
                lines.append(f"| {label} | {res['nDCG@10']:.3f} | {100 * res['nDCG@10'] / t['nDCG@10']:.1f}% "
                             f"| {res['R@100']:.3f} | {res['train_seconds']:.0f} |")
        q2 = r["query"].get("scifact/2")
        if q2:
            lines.append("| Embedding matching only + inherited doc embeddings "
                         "(= the query-only row: queries only, 104 steps of 32) "
                         f"| {q2['nDCG@10']:.3f} | "
                         f"{100 * q2['nDCG@10'] / t['nDCG@10']:.1f}% | {q2['R@100']:.3f} | {q2['train_seconds']:.0f} |")
    lat = r.get("latency")
    if lat:
        lines += ["", f"Query encoding (tokenizer + encoder) on the 256 first SciFact test queries, 1 CPU thread, "
                  f"{lat['rounds']} interleaved rounds × median of {lat['repeats']} passes; speed-up = median over rounds of "
                  "teacher ms / student ms:", "",
                  "| query encoder | ms/query batch 1 | ms/query batch 32 | speed-up batch 1 | speed-up batch 32 |",
                  "|---|---|---|---|---|"]
        for name, ms in lat["ms_per_query"].items():
            sp = lat["speedup"][name]
            lines.append(f"| {name} | {ms['1']:.2f} | {ms['32']:.2f} | {sp['1']:.2f}× | {sp['32']:.2f}× |")
    notes = ns.out / "notes.md"
    write_section("distillation", with_notes("\n".join(lines), notes if notes.is_file() else None))


if __name__ == "__main__":
    main()

"""Benchmark: TCT-ColBERT distillation (003 Eq. 5-6) and dense-sparse fusion (Eq. 7) on NFCorpus.

    OMP_NUM_THREADS=1 SSFT_DATA_HOME=../shared/data python benchmarks/tct_fusion.py --out /work/bench-runs/tct

Three ``ssft-train`` runs (in this process, through ``run_recipe``), each skipped when its metrics.json exists:

1. ``teacher``: recipes/tct_nfcorpus_teacher.yaml — ColBERT (all-MiniLM-L6-v2) fine-tuned briefly; reranks the
   BM25 top-100 of the test queries.
2. ``tct``: recipes/tct_nfcorpus.yaml — the dense student (raw dot product of mean-pooled states, 003 Eq. 2; started
   from the teacher's weights, 003 §4) distilled from that frozen teacher (gamma 0.1, tau 0.25).
3. ``ce``: the same recipe with ``loss={name: contrastive}``: the same student, data, steps, learning rate and
   seed without the teacher (the gamma = 1 case of Eq. 6; it starts from all-MiniLM-L6-v2, having no teacher).
4. ``tct-cos`` (only reported, when its folder exists): the student at the earlier setting (20 x cosine, from
   all-MiniLM-L6-v2), i.e. ``model.normalize=true model.score_scale=20.0 loss.init_from_teacher=false``.

Every student row shows its starting point beside it (metrics.json's ``start``: the model before the first step).

Both students retrieve from the whole corpus (faiss exact); BM25 and the Eq. 7 fusion of each student with BM25
(alpha tuned on the dev queries, ``eval.fusion: auto``) are reported beside them. Writes the 'tct_fusion'
section of BENCHMARKS.md from the runs' metrics.json / run_info.json.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from report import add_notes_option, with_notes, write_section  # noqa: E402

METRICS = ["nDCG@10", "R@100"]


def runs(ns) -> dict[str, tuple[str, list[str]]]:
    common = [f"data.max_train_queries={ns.train_queries}", f"training.per_device_train_batch_size={ns.batch}"]
    teacher = ns.out / "teacher"
    return {
        "teacher": ("tct_nfcorpus_teacher.yaml", [f"data.max_train_queries={ns.teacher_queries}",
                                                  f"training.per_device_train_batch_size={ns.batch}",
                                                  f"training.output_dir={teacher}", *ns.overrides]),
        "tct": ("tct_nfcorpus.yaml", common + [f"training.output_dir={ns.out / 'tct'}", f"loss.teacher={teacher}",
                                               *ns.overrides]),
        "ce": ("tct_nfcorpus.yaml", common + [f"training.output_dir={ns.out / 'ce'}", "loss={name: contrastive}",
                                              *ns.overrides]),
    }


def run_all(ns) -> None:
    from ssft.cli._common import setup_logging
    from ssft.config.recipe import load_recipe
    from ssft.pipeline.run import run_recipe

    setup_logging("INFO")
    if ns.zero_shot:
        zero_shot(ns)
    for name, (recipe, overrides) in runs(ns).items():
        if (ns.out / name / "metrics.json").is_file():
            logging.getLogger("tct_fusion").info("%s: finished earlier, kept", name)
            continue
        run_recipe(load_recipe(ROOT / "recipes" / recipe, overrides), overwrite=True)


def zero_shot(ns) -> None:
    """The students' starting point, untrained: the same dense model, retrieval and tuned fusion as ssft-train's."""
    import time

    from ssft.config.recipe import load_recipe
    from ssft.config.registry import MODELS
    from ssft.core.io import atomic_write_json
    from ssft.data.beir import load_dataset
    from ssft.data.trec import top_k
    from ssft.eval.fusion import fuse_dense_sparse, tune_fusion_alpha
    from ssft.eval.metrics import evaluate_run
    from ssft.eval.retrieve import corpus_vectors, retrieve
    from ssft.firststage.bm25 import BM25

    folder = ns.out / "zeroshot"
    if (folder / "metrics.json").is_file():
        return
    started = time.time()
    recipe = load_recipe(ROOT / "recipes" / "tct_nfcorpus.yaml", ["loss={name: contrastive}"])
    model = MODELS.get("dense").build(recipe.model, "full", {}).requires_grad_(False).eval()
    dataset = load_dataset(recipe.data.dataset)
    vectors = corpus_vectors(model, dataset, 64)
    bm25 = BM25(dataset)
    results, alpha = {}, None
    for split in ("dev", "test"):
        qrels = dataset.qrels(split)
        queries = {q: dataset.queries[q] for q in qrels if q in dataset.queries}
        dense = retrieve(model, dataset, queries, 100, 64, doc_vectors=vectors)
        sparse = top_k(bm25.search(queries, 100), 100)
        if split == "dev":
            alpha = tune_fusion_alpha(dense, sparse, qrels, "nDCG@10")
            continue
        results = {"test": evaluate_run(qrels, dense, METRICS)[0], "bm25": evaluate_run(qrels, sparse, METRICS)[0],
                   "test+bm25.fusion": evaluate_run(qrels, fuse_dense_sparse(dense, sparse, alpha), METRICS)[0]}
    atomic_write_json(folder / "run_info.json", {"fusion_alpha": alpha, "train_seconds": 0.0, "train_loss": None,
                                                 "wall_seconds": round(time.time() - started, 1)})
    atomic_write_json(folder / "metrics.json", results)


def read(ns, name: str) -> tuple[dict, dict] | None:
    folder = ns.out / name
    if not (folder / "metrics.json").is_file():
        return None
    return json.loads((folder / "metrics.json").read_text()), json.loads((folder / "run_info.json").read_text())


def write_report(ns) -> None:
    def row(label: str, metrics: dict, train: str) -> str:
        return f"| {label} | {train} | " + " | ".join(f"{metrics[m]:.3f}" for m in METRICS) + " |"

    def teacher_rows(name: str, label: str) -> list[str]:
        m, info = got[name]
        return [row(label, m["test"], f"listwise CE, {info['train_seconds']:.0f} s")]

    def student_rows(name: str, label: str, loss: str, start: str = "") -> list[str]:
        m, info = got[name]
        fused = next(k for k in m if k.endswith(".fusion"))
        train = f"{loss}, {info['train_seconds']:.0f} s" if info["train_seconds"] else loss
        if info.get("start_selected"):  # the trained model lost to its start on dev: the run hands back the start
            train += "; ⚠ lost to its start on dev, epoch 0 kept"
        rows = [row(f"{label}: dense", m["test"], train)]
        if "start" in m:
            rows.append(row(f"{label}: its starting point ({start or 'before training'})", m["start"], "—"))
        return rows + [row(f"{label} + BM25, fusion α = {info['fusion_alpha']:g}", m[fused], "—")]

    names = ("teacher", "zeroshot", "ce", "tct", "tct-cos", "teacher-128d", "tct-128d")
    got = {name: read(ns, name) for name in names}
    lines = ["## TCT-ColBERT distillation and dense-sparse fusion on NFCorpus (003)", "",
             f"`OMP_NUM_THREADS=1 python benchmarks/tct_fusion.py --out {ns.out} --train-queries {ns.train_queries} "
             f"--teacher-queries {ns.teacher_queries} --batch {ns.batch}"
             + "".join(f" {o}" for o in ns.overrides) + "` (CPU, 1 thread, 2 cores shared with other "
             "jobs; recipes/tct_nfcorpus_teacher.yaml and recipes/tct_nfcorpus.yaml). all-MiniLM-L6-v2 everywhere. "
             f"Teacher: ColBERT, MaxSim over the 384-d token vectors (square projection starting as the identity), "
             f"fine-tuned 1 epoch on {ns.teacher_queries} NFCorpus train queries. Students: the dense bi-encoder scoring by "
             "the raw dot product of mean-pooled states (003 Eq. 2: `model.normalize: false`, `score_scale: 1`), the TCT "
             "student starting from the teacher's trained weights (003 §4, `loss.init_from_teacher`), the CE student from "
             f"all-MiniLM-L6-v2; 1 epoch on {ns.train_queries} train queries (seed 0), 1 positive + 1 BM25 hard "
             f"negative each, batches of {ns.batch} queries (so 2 × {ns.batch} in-batch documents), lr 5e-5, the same "
             "seed, data and steps with and without the teacher; with: γ 0.1, τ 0.25 (003's values), the teacher scoring "
             "every query × in-batch document of each batch. Documents ≤ 128 tokens, queries ≤ 32. Test: all 323 "
             "queries. Dense rows retrieve from the whole corpus (3,633 documents, faiss exact inner product); the "
             "teacher reranks the BM25 top-100 (so its R@100 is BM25's). Fusion = 003 Eq. 7 over the union of the "
             "dense and BM25 top-100, α · BM25 + dense, a missing score filled with that list's minimum; α tuned on "
             "the 324 dev queries by nDCG@10 (grid `ssft.eval.fusion.FUSION_ALPHAS`).", "",
             "| run | training | nDCG@10 | R@100 |", "|---|---|---|---|"]
    if got["teacher"]:
        lines.append(row("BM25 (bm25s)", got["teacher"][0]["bm25"], "—"))
        lines += teacher_rows("teacher", "teacher: ColBERT (384-d), reranks BM25 top-100")
    if got["zeroshot"]:
        lines += student_rows("zeroshot", "student before training (MiniLM zero-shot)", "—")
    if got["ce"]:
        lines += student_rows("ce", "student without TCT", "contrastive (= tct with γ 1)", "MiniLM, raw dot product")
    if got["tct"]:
        lines += student_rows("tct", "student with TCT", "tct (γ 0.1, τ 0.25)", "the teacher's weights, raw dot product")
    if got["tct-cos"]:
        lines += student_rows("tct-cos", "student with TCT at the earlier setting (20 × cosine, from MiniLM)",
                              "tct (γ 0.1, τ 0.25)", "MiniLM, 20 × cosine")
    if got["teacher-128d"] or got["tct-128d"]:
        lines += ["", "A first attempt with a weaker teacher (ColBERT with a 128-d projection trained from random, "
                  "head lr 1e-4, backbone lr 3e-5, 192 queries — the same as the students'):", "",
                  "| run | training | nDCG@10 | R@100 |", "|---|---|---|---|"]
        if got["teacher-128d"]:
            lines += teacher_rows("teacher-128d", "teacher: ColBERT (128-d), reranks BM25 top-100")
        if got["tct-128d"]:
            lines += student_rows("tct-128d", "student with TCT from it", "tct (γ 0.1, τ 0.25)")
    notes = []
    for name in names:
        if got[name]:
            info = got[name][1]
            if name == "zeroshot":
                continue
            notes.append(f"- {name}: mean train loss {info['train_loss']:.4f}, {info['train_seconds']:.0f} s training, "
                         f"{info['wall_seconds']:.0f} s in all")
    lines += ["", *notes]
    write_section("tct_fusion", with_notes("\n".join(lines), ns.notes))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=Path("/work/bench-runs/tct"))
    parser.add_argument("--train-queries", type=int, default=192)
    parser.add_argument("--teacher-queries", type=int, default=384)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--zero-shot", action="store_true", help="also evaluate the untrained student (one more corpus encoding)")
    parser.add_argument("--report-only", action="store_true")
    add_notes_option(parser)
    parser.add_argument("overrides", nargs="*", help="key=value recipe overrides for every run (e.g. eval.precision=fp32)")
    ns = parser.parse_args()
    ns.out.mkdir(parents=True, exist_ok=True)
    if not ns.report_only:
        run_all(ns)
    write_report(ns)


if __name__ == "__main__":
    main()

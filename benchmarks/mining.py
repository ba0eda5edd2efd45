"""Benchmark: training negatives for the dense MiniLM on SciFact — mined with the zero-shot model (false-negative
filters on) vs BM25 vs in-batch only, the same budget; optionally MarginMSE distillation from a cross-encoder's
scores of the mined candidates (issue 20).

    SSFT_DATA_HOME=../shared/data OMP_NUM_THREADS=1 python benchmarks/mining.py --out /tmp/mining_bench \
        [--steps 50] [--parts mine,bm25,mined,inbatch,cross,scored,margin_mse]

Every run is ``recipes/dense_scifact.yaml`` (all-MiniLM-L6-v2, mean pooling, 20 x cosine, Eq. 5 contrastive over
in-batch + hard negatives, batch 16, lr 2e-5, 10 warm-up steps) with ``training.max_steps`` = --steps, only the
training data changed:

- ``zeroshot``: the untrained model at the same document length (the reference row);
- ``mine``: ``ssft-mine --model sentence-transformers/all-MiniLM-L6-v2`` over the 809 train queries (faiss exact),
  top-100, ``--relative-margin`` (default 0.05) and at most ``--pool`` negatives per (query, positive);
- ``bm25``: the recipe as it is (1 BM25 negative drawn per step from the BM25 top-100 minus the positives);
- ``mined``: ``data.train`` = the mined ids file (1 negative drawn per step from each row's pool);
- ``inbatch``: ``data.num_negatives: 0`` (the other queries' positives only);
- ``cross`` / ``scored`` / ``margin_mse``: a MiniLM cross-encoder trained --steps steps on BM25 negatives (its test
  evaluation cut to 20 queries, it is only a teacher), ``ssft-mine --teacher`` rescoring the mined candidates, and
  the dense student trained with ``loss: margin_mse`` on those scores (1 negative per step).

Each part saves its result under --out and is skipped when the result exists (resumable); the 'mining' section of
BENCHMARKS.md is written from whatever parts have results.

``--dataset nfcorpus`` runs the NFCorpus comparison instead (parts ``nf_mine``, ``nf_random``, ``nf_mined``; section
'mining_nfcorpus'): ``recipes/cross_lora_nfcorpus.yaml`` (MiniLM cross-encoder, LoRA, listwise CE, 400 train queries x 1
positive, 3 negatives, 2 epochs + the start on 60 dev queries, test = BM25 top-20 of the 323 test queries, BM25
interpolation tuned on dev) as it is (random negatives), and the same recipe trained from ``data.train`` = a dataset
``ssft-mine`` wrote from the zero-shot MiniLM over all NFCorpus train queries (every judged document excluded, ranks
--nf-range-min .. --nf-range-max, --relative-margin, at most --pool, rows with fewer than --nf-min-negatives
dropped), subsampled by the recipe's own data.max_train_queries / max_positives_per_query (same seed); parts
``nf_mine_deep`` / ``nf_mined_deep`` repeat the mined arm with the ranks of --nf-deep-range (the corpus embeddings
come from the cache the first mining filled). Ranks 11-50 are sentence-transformers' own choice for the MiniLM-mined
natural-questions-hard-negatives (range_min 10, range_max 50); the relative margin 0.05 is the SciFact section's.

    SSFT_DATA_HOME=../shared/data OMP_NUM_THREADS=1 python benchmarks/mining.py --dataset nfcorpus --out /tmp/nf_bench
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

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
PARTS = ("mine", "zeroshot", "bm25", "mined", "inbatch", "cross", "scored", "margin_mse")
NF_PARTS = ("nf_mine", "nf_random", "nf_mined", "nf_mine_deep", "nf_mined_deep")
CROSS_RECIPE = ROOT / "recipes" / "cross_lora_nfcorpus.yaml"  # the MiniLM cross-encoder with LoRA
logger = logging.getLogger("mining_bench")


def run_dense(out: Path, name: str, steps: int, overrides: list[str], doc_length: int = 256) -> dict:
    """recipes/dense_scifact.yaml with ``overrides``, trained ``steps`` steps, documents cut at ``doc_length`` tokens;
    test nDCG@10 / R@100."""
    from ssft.config.recipe import load_recipe
    from ssft.pipeline.run import run_recipe

    folder = out / name
    recipe = load_recipe(ROOT / "recipes" / "dense_scifact.yaml",
                         [f"training.output_dir={folder}", f"training.max_steps={steps}", "training.report_to=[]",
                          f"model.max_length={doc_length}",
                          "eval.metrics=[nDCG@10,R@100]", *overrides])
    started = time.time()
    results = run_recipe(recipe)
    info = json.loads((folder / "run_info.json").read_text())
    return {"test": results["test"], "bm25": results.get("bm25"), "overrides": overrides, "steps": steps,
            "doc_length": doc_length,
            "train_loss": info.get("train_loss"), "notes": info.get("notes"), "seconds": round(time.time() - started)}


def zero_shot(doc_length: int) -> dict:
    """The untrained MiniLM (mean pooling, 20 x cosine) at the runs' document length: the same test retrieval."""
    from ssft.data.beir import load_dataset
    from ssft.eval.retrieve import evaluate_retrieval
    from ssft.models.frozen import dense_reference, load_dense_model

    model = load_dense_model(dense_reference(MINILM, "mean", doc_length, 64))
    model.requires_grad_(False)
    model.eval()
    dataset = load_dataset("scifact")
    started = time.time()
    test = evaluate_retrieval(model, dataset, dataset.qrels("test"), ["nDCG@10", "R@100"])
    return {"test": test, "doc_length": doc_length, "seconds": round(time.time() - started)}


def mine(out: Path, name: str, extra: list[str], dataset: str = "scifact") -> dict:
    from ssft.cli.mine import main

    argv = ["--data", dataset, "--split", "train", "--model", MINILM, "--max-length", "256", "--query-max-length", "64",
            "--depth", "100", "--output", str(out / f"{name}.jsonl"), "--overwrite", *extra]
    if main(argv) != 0:
        raise SystemExit(f"ssft-mine {' '.join(argv)} failed")
    return json.loads((out / f"{name}.mining.json").read_text())


def run_cross_recipe(out: Path, name: str, overrides: list[str]) -> dict:
    """recipes/cross_lora_nfcorpus.yaml with ``overrides``: metrics.json (model, BM25, interpolation, start) and what run_info
    says of the validation by epoch and the training."""
    from ssft.config.recipe import load_recipe
    from ssft.pipeline.run import run_recipe

    folder = out / name
    recipe = load_recipe(CROSS_RECIPE, [f"training.output_dir={folder}", "training.report_to=[]", *overrides])
    started = time.time()
    results = run_recipe(recipe)
    info = json.loads((folder / "run_info.json").read_text())
    return {**results, "overrides": overrides, "validation_history": info.get("validation_history"),
            "best_validation": info.get("best_validation"), "start_selected": info.get("start_selected"),
            "interpolation_alpha": info.get("interpolation_alpha"), "train_loss": info.get("train_loss"),
            "notes": info.get("notes"), "seconds": round(time.time() - started)}


def chance(out: Path, name: str, shuffles: int = 20) -> dict:
    """nDCG@10 of BM25's test top-20 (the run the cross-encoder recipe reranks) in a random order: mean and range of
    ``shuffles`` seeded shuffles — the level a model that learnt nothing scores."""
    import random
    import statistics

    from ssft.data.beir import load_dataset
    from ssft.data.trec import read_run
    from ssft.eval.metrics import evaluate_run

    run = read_run(out / name / "run.bm25.test.trec")
    qrels = load_dataset("nfcorpus").qrels("test")
    values = []
    for i in range(shuffles):
        rng = random.Random(i)
        shuffled = {}
        for qid, docs in run.items():
            order = sorted(docs)
            rng.shuffle(order)
            shuffled[qid] = {d: float(len(order) - k) for k, d in enumerate(order)}
        values.append(evaluate_run(qrels, shuffled, ["nDCG@10"])[0]["nDCG@10"])
    return {"mean": statistics.mean(values), "min": min(values), "max": max(values), "shuffles": shuffles}


def training_pairs(mined_file: Path) -> dict:
    """The (query, positive) pairs each arm trains on: the cross-encoder recipe's draw from the BEIR qrels and the same draw
    (``TrainSource.subsample``) from the mined rows; how many queries and pairs they share."""
    from ssft.config.recipe import load_recipe
    from ssft.data.beir import load_dataset
    from ssft.data.examples import build_examples, subsample_queries
    from ssft.data.hf_sources import load_train_source

    d = load_recipe(CROSS_RECIPE).data
    dataset = load_dataset("nfcorpus")
    qrels = subsample_queries(dataset.qrels(d.train_split), d.max_train_queries, d.sample_seed)
    beir = {(ex.qid, ex.positive) for ex in build_examples(qrels, list(dataset.corpus), None, d.min_relevance,
                                                          d.max_positives_per_query, d.sample_seed)}
    source = load_train_source(str(mined_file), dataset)
    rows = source.subsample(d.max_train_queries, d.max_positives_per_query, d.sample_seed).examples
    mined = {(ex.qid, ex.positive) for ex in rows}
    # "quickstart_pairs": the random arm's pairs (the key results saved by earlier invocations use)
    return {"quickstart_pairs": len(beir), "mined_pairs": len(mined), "mined_rows": len(rows),
            "mined_queries_all": len({ex.qid for ex in source.examples}), "train_queries": len(dataset.qrels(d.train_split)),
            "queries_shared": len({q for q, _ in beir} & {q for q, _ in mined}), "pairs_shared": len(beir & mined),
            "pool_per_row": round(sum(len(ex.negatives) for ex in rows) / len(rows), 2)}


def saved(out: Path, part: str):
    path = out / f"{part}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def save(out: Path, part: str, result: dict) -> None:
    (out / f"{part}.json").write_text(json.dumps(result, indent=2) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/mining_bench"))
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--doc-length", type=int, default=256, help="document tokens (model.max_length) of every run")
    parser.add_argument("--mined", type=Path, default=None,
                        help="use this ssft-mine output (its .mining.json beside it) instead of part 'mine'")
    parser.add_argument("--relative-margin", type=float, default=0.05)
    parser.add_argument("--pool", type=int, default=20, help="mined negatives kept per (query, positive)")
    parser.add_argument("--teacher-negatives", type=int, default=7, help="mined negatives rescored per row (cross teacher)")
    parser.add_argument("--parts", default=None, help="comma-separated parts (default: all of the dataset's)")
    parser.add_argument("--write-only", action="store_true", help="only write the BENCHMARKS.md section")
    parser.add_argument("--dataset", default="scifact", choices=("scifact", "nfcorpus"),
                        help="scifact: the dense comparison; nfcorpus: the cross-encoder recipe, random vs mined")
    parser.add_argument("--nf-range-min", type=int, default=11, help="nfcorpus: best rank a mined negative may have")
    parser.add_argument("--nf-range-max", type=int, default=50, help="nfcorpus: worst rank a mined negative may have")
    parser.add_argument("--nf-deep-range", default="51,100",
                        help="nfcorpus: the rank range of the second mined arm (parts nf_mine_deep, nf_mined_deep)")
    parser.add_argument("--nf-min-negatives", type=int, default=3,
                        help="nfcorpus: drop rows with fewer mined negatives (the recipe draws 3 per step)")
    ns = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    import torch

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    ns.out.mkdir(parents=True, exist_ok=True)
    if ns.dataset == "nfcorpus":
        return nfcorpus(ns)
    parts = [p for p in (ns.parts or ",".join(PARTS)).split(",") if p] if not ns.write_only else []
    mined_file = ns.mined or ns.out / "mined.jsonl"
    if ns.mined is not None and saved(ns.out, "mine") is None:
        save(ns.out, "mine", json.loads(ns.mined.with_suffix(".mining.json").read_text()))
    filters = ["--relative-margin", str(ns.relative_margin)]
    for part in parts:
        if saved(ns.out, part) is not None:
            continue
        logger.info("part %s", part)
        if part == "mine":
            result = mine(ns.out, "mined", [*filters, "--num-negatives", str(ns.pool)])
        elif part == "zeroshot":
            result = zero_shot(ns.doc_length)
        elif part == "bm25":
            result = run_dense(ns.out, part, ns.steps, [], ns.doc_length)
        elif part == "mined":
            result = run_dense(ns.out, part, ns.steps, [f"data.train={mined_file}"], ns.doc_length)
        elif part == "inbatch":
            result = run_dense(ns.out, part, ns.steps, ["data.num_negatives=0"], ns.doc_length)
        elif part == "cross":
            result = run_dense(ns.out, part, ns.steps, ["model.architecture=cross", "loss={name: listwise_ce}",
                                                        "data.max_test_queries=20", "eval.depth=20"], ns.doc_length)
        elif part == "scored":
            result = mine(ns.out, "scored", [*filters, "--num-negatives", str(ns.teacher_negatives),
                                             "--teacher", str(ns.out / "cross")])
        elif part == "margin_mse":
            result = run_dense(ns.out, part, ns.steps, [f"data.train={ns.out / 'scored.jsonl'}", "loss={name: margin_mse}"],
                               ns.doc_length)
        else:
            raise SystemExit(f"unknown part {part}")
        save(ns.out, part, result)
    write(ns)
    return 0


def nf_ranges(ns) -> dict[str, tuple[int, int]]:
    """The rank range of each mined arm: nf_mine(d) and nf_mine(d)_deep."""
    deep = tuple(int(x) for x in ns.nf_deep_range.split(","))
    return {"": (ns.nf_range_min, ns.nf_range_max), "_deep": deep}


def nf_filters(ns, ranks: tuple[int, int]) -> list[str]:
    return ["--range-min", str(ranks[0]), "--range-max", str(ranks[1]), "--relative-margin",
            str(ns.relative_margin), "--num-negatives", str(ns.pool), "--min-negatives", str(ns.nf_min_negatives)]


def nfcorpus(ns) -> int:
    """The NFCorpus parts: mine, the cross-encoder recipe as it is, the same on the mined rows; then the section."""
    parts = [p for p in (ns.parts or ",".join(NF_PARTS)).split(",") if p] if not ns.write_only else []
    ranges = nf_ranges(ns)
    for part in parts:
        if saved(ns.out, part) is not None:
            continue
        logger.info("part %s", part)
        suffix = "_deep" if part.endswith("_deep") else ""
        mined_file = ns.out / f"nf_mined{suffix}.jsonl"
        if part in ("nf_mine", "nf_mine_deep"):
            result = mine(ns.out, f"nf_mined{suffix}", nf_filters(ns, ranges[suffix]), dataset="nfcorpus")
            result["training_pairs"] = training_pairs(mined_file)
        elif part == "nf_random":
            result = run_cross_recipe(ns.out, part, [])
            result["chance"] = chance(ns.out, part)
        elif part in ("nf_mined", "nf_mined_deep"):
            result = run_cross_recipe(ns.out, part, [f"data.train={mined_file}"])
        else:
            raise SystemExit(f"unknown part {part} (nfcorpus: {', '.join(NF_PARTS)})")
        save(ns.out, part, result)
    write_nfcorpus(ns)
    return 0


def _validation(result: dict) -> str:
    return ", ".join(f"{h['epoch']:g}: {h['eval_nDCG@10']:.3f}" for h in result["validation_history"] or [])


def write_nfcorpus(ns) -> None:
    from report import write_section

    r = {p: saved(ns.out, p) for p in NF_PARTS}
    ranges = nf_ranges(ns)
    lines = [
        "## The cross-encoder LoRA recipe on NFCorpus: random vs mined (filtered) negatives",
        "",
        f"`SSFT_DATA_HOME=../shared/data OMP_NUM_THREADS=1 python benchmarks/mining.py --dataset nfcorpus --out OUT "
        f"--relative-margin {ns.relative_margin} --pool {ns.pool} --nf-range-min {ns.nf_range_min} --nf-range-max "
        f"{ns.nf_range_max} --nf-deep-range {ns.nf_deep_range} --nf-min-negatives {ns.nf_min_negatives}` (CPU, 2 cores "
        "shared with other jobs, one thread per run; the parts ran as separate processes with `--parts`). Every row is "
        "`recipes/cross_lora_nfcorpus.yaml` unchanged (all-MiniLM-L6-v2 cross-encoder, LoRA r16, listwise CE, 128 tokens, 400 "
        "train queries × 1 positive × 3 negatives, batch 8, 2 epochs = 100 steps, seed 42; best of the start and 2 "
        "epochs on 60 dev queries; test = BM25 top-20 of the 323 test queries reranked, and the interpolation with "
        "BM25's score, weight tuned on dev); a mined row only adds `data.train=<the mined file>`, which the recipe's "
        "own `data.max_train_queries: 400` / `max_positives_per_query: 1` subsample with the same seed.",
        "",
        "| training negatives | test nDCG@10 | test+bm25 nDCG@10 | test RR@10 | dev nDCG@10 by epoch (0 = start) "
        "| kept | train loss (chance ln 4 = 1.386) |",
        "|---|---|---|---|---|---|---|",
    ]
    bm25 = next((r[k]["bm25"] for k in ("nf_random", "nf_mined", "nf_mined_deep") if r[k]), None)
    if bm25:
        lines.append(f"| BM25 alone | {bm25['nDCG@10']:.4f} | — | {bm25['RR@10']:.4f} | — | — | — |")
    if r["nf_random"] and r["nf_random"].get("chance"):
        c = r["nf_random"]["chance"]
        lines.append(f"| chance: BM25's top-20 shuffled ({c['shuffles']} seeds) | {c['mean']:.4f} "
                     f"({c['min']:.3f}–{c['max']:.3f}) | — | — | — | — | — |")
    labels = {"nf_random": "random (the recipe as it is)"}
    for suffix, (lo, hi) in ranges.items():
        labels[f"nf_mined{suffix}"] = (f"mined by zero-shot MiniLM, ranks {lo}–{hi}, relative margin "
                                       f"{ns.relative_margin:g} (`data.train`, ids form)")
    for key in ("nf_random", "nf_mined", "nf_mined_deep"):
        x = r[key]
        if not x:
            continue
        kept = "the start (epoch 0)" if x.get("start_selected") else f"epoch {x['best_validation']['epoch']:g}"
        kept += f"; α {x['interpolation_alpha']:g}" if x.get("interpolation_alpha") is not None else ""
        lines.append(f"| {labels[key]} | {x['test']['nDCG@10']:.4f} | {x['test+bm25']['nDCG@10']:.4f} | "
                     f"{x['test']['RR@10']:.4f} | {_validation(x)} | {kept} | {x['train_loss']:.4f} |")
    for suffix, (lo, hi) in ranges.items():
        m = r[f"nf_mine{suffix}"]
        if not m:
            continue
        removed = ", ".join(f"{k} {v:,}" for k, v in sorted(m["removed"].items()))
        bands = ", ".join(f"{k}: {v:,}" for k, v in m["judged_excluded_by_rank"].items())
        lines += ["", f"Mining for ranks {lo}–{hi} (`{' '.join(m['command'])}`, {m['seconds']:.0f} s), per (query, "
                  f"judged positive): first every judged document of the query is excluded — {m['judged_excluded']:,} "
                  f"judged documents in the {m['depth']}-deep candidate lists of the train queries (by the miner's rank: "
                  f"{bands}); then of the {m['candidates']:,} remaining candidates the filters removed: {removed}. "
                  f"{m['rows']:,} rows of {m['queries']:,} queries kept ({m['negatives_per_row']} negatives each on "
                  f"average), {m['rows_dropped_too_few_negatives']:,} (query, positive) rows dropped with fewer than "
                  f"{ns.nf_min_negatives} negatives left.",
                  "", f"What the filters did on NFCorpus: the judged documents crowd the miner's top ranks (ranks 1–10 "
                  f"hold {m['judged_excluded_by_rank'].get('1-10', 0) / max(m['judged_excluded'], 1):.0%} of those in "
                  f"the top {m['depth']}), which is why the very top is skipped. The relative margin is what removes the "
                  f"most: {m['rows_dropped_too_few_negatives'] / (m['rows'] + m['rows_dropped_too_few_negatives']):.0%} of "
                  "the (query, positive) rows keep fewer than "
                  f"{ns.nf_min_negatives} candidates scored below {1 - ns.relative_margin:g} × their positive, i.e. the "
                  "zero-shot miner scores most NFCorpus positives (largely indirect links) below the unjudged documents "
                  f"at ranks {lo}+. The mined arm therefore trains on other positives, not only other negatives: the "
                  "pairs the miner already ranks high."]
        t = m.get("training_pairs")
        if t:
            lines += ["", f"What this arm trains on: the recipe's subsample keeps {t['mined_rows']} rows "
                      f"({t['mined_pairs']} (query, positive) pairs, {t['pool_per_row']} mined negatives per row, 3 "
                      f"drawn per epoch); {t['queries_shared']} of its queries and {t['pairs_shared']} of its pairs are "
                      f"in the random arm's draw ({t['quickstart_pairs']} pairs)"
                      + (f": {t['train_queries'] - t['mined_queries_all']} of the {t['train_queries']} train queries "
                         "lost every row to the filters, which changes the seeded draw over the sorted queries."
                         if t["mined_queries_all"] < t["train_queries"] else ".")]
    done = [k for k in ("nf_random", "nf_mined", "nf_mined_deep") if r[k]]
    if done:
        lines += ["", "Wall-clock per run (shared machine): " + ", ".join(f"{k} {r[k]['seconds']} s" for k in done) + "."]
    missing = [k for k in NF_PARTS if not r[k]]
    if missing:
        lines += ["", f"No result (not run, or not finished in the time): {', '.join(missing)}."]
    write_section("mining_nfcorpus", "\n".join(lines))


def write(ns) -> None:
    from report import write_section

    r = {p: saved(ns.out, p) for p in PARTS}
    lines = [
        "## Training negatives for the dense MiniLM on SciFact: mined (filtered) vs BM25 vs in-batch only",
        "",
        f"`OMP_NUM_THREADS=1 python benchmarks/mining.py --steps {ns.steps} --doc-length {ns.doc_length} "
        f"--relative-margin {ns.relative_margin} --pool {ns.pool}"
        + (f" --mined {ns.mined}" if ns.mined else "") + "` (CPU, 2 cores shared with three other jobs, one thread). "
        f"Every row is `recipes/dense_scifact.yaml` (all-MiniLM-L6-v2, mean pooling, 20 × cosine, Eq. 5 over in-batch "
        f"+ hard negatives, batch 16, lr 2e-5, 10 warm-up steps) trained **{ns.steps} steps** (16 (query, positive) "
        f"items each) on SciFact train with documents cut at **{ns.doc_length} tokens** (training and index), only the "
        "training negatives changed; test = full retrieval of all 5,183 abstracts (faiss exact) for the 300 test "
        "queries. The first two reference rows come from the dense_daft section (documents at 256 tokens).",
        "",
        "| training data | negatives per query and step | nDCG@10 | R@100 |",
        "|---|---|---|---|",
        "| zero-shot MiniLM (dense_daft a0) | — | 0.645 | 0.925 |",
        "| earlier fine-tuned row (dense_daft a1: 300 train queries, 1 epoch = 22 steps, BM25 negatives) | 1 BM25 "
        "| 0.672 | 0.935 |",
    ]
    rows = [("zeroshot", f"zero-shot MiniLM, documents at {ns.doc_length} tokens (measured here)", "—"),
            ("bm25", "BM25 negatives (the recipe as it is)", "1 from the BM25 top-100 minus positives"),
            ("mined", "mined by zero-shot MiniLM, filtered (`data.train`, ids form)",
             f"1 from the row's pool (≤ {ns.pool})"),
            ("inbatch", "in-batch only (`data.num_negatives: 0`)", "0 (the other 15 queries' positives)"),
            ("margin_mse", "MarginMSE from the cross-encoder's scores of the mined candidates", "1 (scored form)")]
    for key, label, negatives in rows:
        if r[key]:
            t = r[key]["test"]
            lines.append(f"| {label} | {negatives} | {t['nDCG@10']:.3f} | {t['R@100']:.3f} |")
    m = r["mine"]
    if m:
        removed = ", ".join(f"{k} {v:,}" for k, v in sorted(m["removed"].items()))
        lines += ["", f"Mining (`{' '.join(m['command'])}`, {m['seconds']:.0f} s): {m['candidates']:,} candidates "
                  f"(top-100 minus judged documents, per (query, positive)); removed: {removed}; {m['rows']} rows kept "
                  f"with {m['negatives_per_row']} negatives each on average, {m['rows_dropped_too_few_negatives']} "
                  "dropped (no negative left). `relative_margin` removes the candidates the zero-shot model scores "
                  f"above {1 - ns.relative_margin:.2f} × the positive's score: the likely unlabelled positives."]
    if r["cross"]:
        lines += ["", f"The teacher of the MarginMSE row: a MiniLM cross-encoder (`model.architecture=cross`, listwise "
                  f"CE, BM25 negatives) trained {ns.steps} steps; on 20 test queries reranking BM25's top 20 it scores "
                  f"nDCG@10 {r['cross']['test']['nDCG@10']:.3f} (BM25 {r['cross']['bm25']['nDCG@10']:.3f})."]
    done = [k for k in ("bm25", "mined", "inbatch", "margin_mse") if r[k]]
    if done:
        lines += ["", "Wall-clock per run (training + full retrieval, shared machine): "
                  + ", ".join(f"{k} {r[k]['seconds']} s" for k in done) + "."]
    missing = [k for k in PARTS if not r[k]]
    if missing:
        lines += ["", f"Not run (time): {', '.join(missing)}."]
    write_section("mining", "\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())

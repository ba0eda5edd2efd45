"""ssft-rerank RUN_DIR --data DATASET --first-stage RUN.trec --split SPLIT --output OUT_DIR

Reloads a finished run's model and reranks a first-stage run; writes OUT_DIR/run.trec and
OUT_DIR/metrics.json ({split: {...}, first_stage_name: {...}}, the same contract as ssft-train).

OUT_DIR follows the output-folder rule of ``ssft.core.run_folder``: new, empty or an earlier ssft-rerank output (a finished
one only with ``--overwrite``, which removes only what ssft-rerank wrote); never a training run's folder, nor the run,
the dataset or the first-stage file being read, a folder holding one or a folder inside one. Everything is loaded
and checked before OUT_DIR is touched (and locked); metrics.json is removed first and written last.
"""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from ssft.cli._common import (
    add_precision_argument,
    at_least_one,
    dataset_sources,
    model_dir,
    model_sources,
    output_path,
    parse_args,
    precision_of,
    result_folder,
    setup_logging,
)
from ssft.core.errors import SsftError, cli_entry, user_path
from ssft.core.run_folder import RERANK_OUTPUTS

logger = logging.getLogger("ssft")


@cli_entry("ssft-rerank")
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ssft-rerank", description="Rerank a first-stage run with a trained ssft model.")
    parser.add_argument("run_dir", type=user_path, help="output folder of ssft-train (or its model/ folder)")
    parser.add_argument("--data", required=True, help="BEIR folder, or dataset name under $SSFT_DATA_HOME")
    parser.add_argument("--first-stage", required=True, help="TREC run file to rerank, or 'bm25'")
    parser.add_argument("--split", required=True, help="qrels split to evaluate on (e.g. test)")
    parser.add_argument("--output", required=True, type=output_path, help="folder for run.trec and metrics.json")
    parser.add_argument("--depth", type=int, default=100, help="rerank the first stage's top-k (default 100)")
    parser.add_argument("--metrics", default="P@20,nDCG@5,nDCG@10,nDCG@20,RR@10,R@100")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an earlier ssft-rerank result in --output (only what ssft-rerank wrote is removed)")
    parser.add_argument("--trust-remote-code", action="store_true",
                        help="allow a model whose base needs its own code (transformers trust_remote_code); off by default")
    parser.add_argument("--merge-lora", action="store_true", help="merge LoRA weights into the backbone first (lora, lora++)")
    parser.add_argument("--queries", choices=["judged", "run"], default="judged",
                        help="average over every judged query of the split, a query the run lacks scoring 0 "
                             "(judged, the default, as ssft-train does), or only over the run's queries (run)")
    from ssft.firststage.runs import first_stage_run, report_name, save_indexes

    add_precision_argument(parser)
    ns = parse_args(parser, argv)

    setup_logging("INFO")
    from ssft.core.io import atomic_write_json
    from ssft.data.beir import load_dataset
    from ssft.eval.metrics import parse_measures
    from ssft.eval.rerank import format_table, rerank_and_report
    from ssft.models import load_ranker
    from ssft.training.prediction import prediction_trainer

    at_least_one(ns, "depth", "batch_size")
    precision = precision_of(ns)
    metrics = [m.strip() for m in ns.metrics.split(",") if m.strip()]
    parse_measures(metrics, "--metrics")
    folder_of_model = model_dir(ns.run_dir)
    sources = model_sources(ns.run_dir, folder_of_model) + dataset_sources(ns.data)
    if Path(ns.first_stage).exists():
        sources += ((Path(ns.first_stage), "the first-stage run file being read"),)
    folder = result_folder(ns.output, "ssft-rerank", RERANK_OUTPUTS, ns.overwrite, sources)
    dataset = load_dataset(ns.data)
    folder.add_sources((dataset.path, "the dataset folder being read"))
    qrels = dataset.qrels(ns.split)
    indexes: dict = {}
    name, first = first_stage_run(ns.first_stage, dataset, indexes, {q: dataset.queries[q] for q in qrels}, ns.depth)
    name = report_name(name, ns.split)
    covered = sum(1 for q in qrels if first.get(q))
    if not covered:
        raise SsftError(f"{ns.first_stage}: no query of the run is in {dataset.path}/qrels/{ns.split}")
    if ns.queries == "run":
        qrels = {q: rels for q, rels in qrels.items() if q in first}
    elif covered < len(qrels):
        logger.warning("the first stage has candidates for %d of the %d judged queries of '%s'; the other %d score 0 "
                       "(--queries run averages over the run's queries only)", covered, len(qrels), ns.split,
                       len(qrels) - covered)
    ranker = load_ranker(folder_of_model, trust_remote_code=ns.trust_remote_code)
    if ns.merge_lora:
        ranker.merge_adapter()
    from ssft.core.precision import resolve

    precision = resolve(precision, next(ranker.parameters()).device, "--precision")
    logger.info("scoring in %s", precision)
    with folder:  # from here on, OUT_DIR is written (and locked)
        folder.claim()
        if ns.overwrite:
            folder.clear()
        folder.mark_unfinished()
        results, info = rerank_and_report(
            score=prediction_trainer(ranker, ns.batch_size, ns.output, precision).score, dataset=dataset, split=ns.split,
            qrels=qrels, first_stage=first, first_stage_name=name, depth=ns.depth, metrics=metrics, output_dir=ns.output,
        )
        # the contract names the model's run plainly run.trec
        (ns.output / f"run.{ns.split}.trec").replace(ns.output / "run.trec")
        atomic_write_json(ns.output / "metrics.json", results)  # last: its presence marks a finished result
        save_indexes(indexes)  # a BM25 index built now, cached once the result is complete
    print(format_table(results, metrics))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""ssft-mine --data DATASET --split SPLIT --output FILE.jsonl (--model MODEL | --bm25) — hard negatives for training.

Retrieves the top-``--depth`` documents of every judged query of the split with a miner — a dense model over the
whole corpus with faiss (``--model``: an ssft run folder / model folder of architecture 'dense', or a sentence
embedder by hub id or folder, e.g. sentence-transformers/all-MiniLM-L6-v2, with ``--pooling``), or BM25 (``--bm25``,
the index cached under $SSFT_CACHE) — and keeps, per (query, judged positive), the candidates that pass the
false-negative filters (``ssft.eval.mining``: rank range, absolute / relative margin to the positive's score,
maximum score, at most ``--num-negatives``). ``--teacher RUN`` rescores the kept (query, document) pairs with an
ssft run (e.g. a cross-encoder) and writes its scores.

Writes FILE.jsonl in a form ``data.train`` reads (``--form ids``: query_id, positive_id, negative_ids;
``--form scored``: query_id, document_ids = [positive, negatives ...], scores — the teacher's, else the miner's)
and FILE.mining.json: how it was made (miner, filters, what each filter removed, the command). Both are written
atomically, after everything else succeeded. The output-file rule of ``ssft.core.run_folder``: never inside the
dataset being mined (nor a model read); an existing pair is replaced only with ``--overwrite`` and only when its
.mining.json says ssft-mine wrote it; a lock file beside it (``.FILE.jsonl.ssft.lock``) keeps out a second writer.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ssft.cli._common import at_least_one, dataset_sources, output_path, parse_args, setup_logging
from ssft.core.errors import SsftError, cli_entry, user_path


@cli_entry("ssft-mine")
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ssft-mine", description="Mine hard negatives for training queries.")
    parser.add_argument("--data", required=True, help="BEIR folder, or dataset name under $SSFT_DATA_HOME")
    parser.add_argument("--split", default="train", help="qrels split whose queries are mined (default train)")
    parser.add_argument("--output", required=True, type=output_path,
                        help="the dataset to write (.jsonl; never inside the dataset folder being mined)")
    miner = parser.add_mutually_exclusive_group(required=True)
    miner.add_argument("--model", help="dense miner: an ssft run / model folder, or a sentence embedder by name or folder")
    miner.add_argument("--bm25", action="store_true", help="BM25 miner (bm25s, English stopwords)")
    parser.add_argument("--pooling", default="mean", help="pooling of a --model given by name (mean or cls)")
    parser.add_argument("--max-length", type=int, default=256, help="document tokens of a --model given by name")
    parser.add_argument("--query-max-length", type=int, default=64, help="query tokens of a --model given by name")
    parser.add_argument("--depth", type=int, default=100, help="candidates retrieved per query")
    parser.add_argument("--range-min", type=int, default=1, help="best rank a negative may have (1 = top)")
    parser.add_argument("--range-max", type=int, default=None, help="worst rank a negative may have (default --depth)")
    parser.add_argument("--absolute-margin", type=float, default=None, help="keep score <= positive score - margin")
    parser.add_argument("--relative-margin", type=float, default=None, help="keep score <= positive score * (1 - margin)")
    parser.add_argument("--max-score", type=float, default=None, help="keep score <= this")
    parser.add_argument("--num-negatives", type=int, default=None, help="keep at most this many per row, best first")
    parser.add_argument("--min-negatives", type=int, default=1, help="drop rows left with fewer negatives")
    parser.add_argument("--min-relevance", type=int, default=1, help="qrels grade counted as a positive")
    parser.add_argument("--form", default=None, choices=("ids", "scored"),
                        help="output form (default: scored with --teacher, else ids)")
    parser.add_argument("--teacher", type=user_path, default=None, help="an ssft run that rescores the kept pairs")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--trust-remote-code", action="store_true",
                        help="run Python code a saved model ships; only for models you trust")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an earlier ssft-mine --output and its .mining.json (never a file ssft-mine did not write)")
    ns = parse_args(parser, argv)

    at_least_one(ns, "depth", "batch_size", "max_length", "query_max_length")
    output = ns.output
    if output.suffix != ".jsonl":
        raise SsftError(f"--output: {output}: expected a .jsonl file")
    from ssft.core.run_folder import OutputFile, resolved

    if output.is_symlink() and output.exists():
        output = resolved(output)  # a link to an earlier output: that file is the one replaced (the link stays)
    info_path = output.with_suffix(".mining.json")
    sources = tuple((Path(p), f"the {flag} model being read") for flag, p in (("--model", ns.model), ("--teacher", ns.teacher))
                    if p is not None and Path(p).exists()) + dataset_sources(ns.data, "the dataset folder being mined")
    # the output-file rule (ssft.core.run_folder): never into what is read; an existing pair replaced only with
    # --overwrite and only when its .mining.json says ssft-mine wrote it
    target = OutputFile(output, "ssft-mine", lambda: _not_mined(output, info_path), companions=(info_path,),
                        sources=sources, overwrite=ns.overwrite)
    target.check()
    form = ns.form or ("scored" if ns.teacher else "ids")

    setup_logging("INFO")
    from ssft.data.beir import load_dataset
    from ssft.eval.mining import MiningFilters

    filters = MiningFilters(ns.range_min, ns.range_max, ns.absolute_margin, ns.relative_margin, ns.max_score,
                            ns.num_negatives, ns.min_negatives)
    filters.check()
    started = time.time()
    dataset = load_dataset(ns.data)
    target.add_sources((dataset.path, "the dataset folder being mined"))
    qrels = dataset.qrels(ns.split)
    teacher = _load_teacher(ns) if ns.teacher else None  # a bad teacher fails before the mining
    with target:
        target.claim()  # one writer: a second ssft-mine onto this file is refused from here on
        return _mine_and_write(ns, argv, dataset, qrels, teacher, filters, form, output, info_path, started)


def _mine_and_write(ns, argv, dataset, qrels, teacher, filters, form, output, info_path, started) -> int:
    from ssft.core.io import atomic_write_json, atomic_write_text
    from ssft.eval.mining import mine, teacher_run, to_records

    if ns.bm25:
        retrieve_fn, score_fn, miner, index = _bm25_miner(dataset)
    else:
        retrieve_fn, score_fn, miner = _dense_miner(ns, dataset)
        index = None
    rows, report = mine(retrieve_fn, score_fn, dataset.queries, qrels, ns.depth, filters, ns.min_relevance)
    if not rows:
        raise SsftError(f"ssft-mine: the filters left no row with {ns.min_negatives} negative(s) or more "
                        f"({report.as_dict()['removed']}); loosen them")
    teacher_scores = None
    if teacher is not None:
        from ssft.data.examples import PairDataset

        pairs = PairDataset(teacher_run(rows), 10 ** 9, dataset)
        teacher_scores = pairs.to_run(teacher.score(pairs))
    records = to_records(rows, form, teacher_scores)
    import json

    info = {"tool": "ssft-mine", "dataset": ns.data, "split": ns.split, "miner": miner, "depth": ns.depth, "form": form,
            "teacher": str(ns.teacher) if ns.teacher else None, "filters": filters.__dict__ | {
                "range_max": filters.range_max or ns.depth}, **report.as_dict(),
            "seconds": round(time.time() - started, 1), "command": ["ssft-mine", *(argv if argv is not None else sys.argv[1:])]}
    if index is not None:
        index.save()  # the BM25 index built now: cached for the next run
    output.parent.mkdir(parents=True, exist_ok=True)
    # the mark first (it says ssft-mine wrote the pair), an earlier dataset of the pair removed before it: a kill
    # between leaves a .mining.json without its dataset, never a dataset described by another run's .mining.json
    output.unlink(missing_ok=True)
    atomic_write_json(info_path, info)
    atomic_write_text(output, "".join(json.dumps(r) + "\n" for r in records))
    removed = ", ".join(f"{k} {v}" for k, v in sorted(report.removed.items())) or "nothing"
    print(f"ssft-mine: {report.rows} rows of {report.queries} queries, {report.negatives} negatives "
          f"({report.as_dict()['negatives_per_row']} per row) from {report.candidates} candidates ({report.judged} judged "
          f"documents excluded first); removed: {removed}; {report.rows_dropped} rows dropped -> {output}")
    return 0


def _not_mined(output: Path, info_path: Path) -> str | None:
    """What shows that ssft-mine did not write the files at ``output`` / ``info_path`` (None: it did): its
    ``.mining.json`` (``tool``, or an older one's ``command``) is the mark."""
    import json

    if not info_path.exists():
        return f"no {info_path.name} beside it"
    try:
        info = json.loads(info_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return f"{info_path.name} is not ssft-mine's JSON"
    command = info.get("command") if isinstance(info, dict) else None
    if not isinstance(info, dict) or not (info.get("tool") == "ssft-mine" or (
            isinstance(command, list) and command[:1] == ["ssft-mine"])):
        return f"{info_path.name} does not name ssft-mine"
    return None


def _bm25_miner(dataset):
    from ssft.firststage.bm25 import BM25

    bm25 = BM25(dataset, save=False)

    def score_positives(wanted: dict[str, list[str]]) -> dict[str, dict[str, float]]:
        return {q: dict(zip(docs, bm25.scores_of(dataset.queries[q], docs))) for q, docs in wanted.items()}

    return bm25.search, score_positives, "bm25", bm25


def _dense_miner(ns, dataset):
    from ssft.eval.retrieve import retrieve
    from ssft.models.base import load_ranker, saved_model_folder
    from ssft.models.bi import score_candidates
    from ssft.models.frozen import dense_reference, load_dense_model

    folder = saved_model_folder(ns.model)
    if folder is not None:
        model = load_ranker(folder, trust_remote_code=ns.trust_remote_code)
        if not model.full_retrieval:
            raise SsftError(f"--model: {ns.model} is a '{model.architecture}' model; mining over the corpus needs a "
                            f"dense model (or use --bm25)")
        miner = f"dense: {folder}"
    else:
        model = load_dense_model(dense_reference(ns.model, ns.pooling, ns.max_length, ns.query_max_length),
                                 trust_remote_code=ns.trust_remote_code)
        miner = f"dense: {ns.model} ({ns.pooling} pooling, {ns.max_length} / {ns.query_max_length} tokens)"
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)

    def retrieve_fn(queries: dict[str, str], depth: int):
        return retrieve(model, dataset, queries, depth, ns.batch_size)

    def score_positives(wanted: dict[str, list[str]]):
        return score_candidates(model, wanted, dataset.queries, dataset, ns.batch_size)

    return retrieve_fn, score_positives, miner


def _load_teacher(ns):
    from ssft.cli._common import model_dir
    from ssft.models import load_ranker
    from ssft.training.prediction import prediction_trainer

    ranker = load_ranker(model_dir(ns.teacher), trust_remote_code=ns.trust_remote_code)
    ranker.eval()
    return prediction_trainer(ranker, ns.batch_size)


if __name__ == "__main__":
    sys.exit(main())

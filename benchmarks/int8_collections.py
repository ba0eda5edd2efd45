"""Whether int8 serving holds on every collection: a model's nDCG@10 at each serving precision (fp32, bf16,
OpenVINO int8 calibrated on what is served), on several datasets, against fp32 — retrieving from the whole corpus,
and reranking BM25's top-k.

    SSFT_DATA_HOME=../shared/data python benchmarks/int8_collections.py runs/quickstart \
        [--rerank runs/quickstart,runs/cross] [--depth 100] [--datasets scifact,nfcorpus,cranfield] \
        [--arms fp32,bf16,int8] [--per-dataset] [--out runs/bench/int8] [--notes FILE] [--write] \
        [--section NAME --title TITLE]

Each arm is ``ssft-eval MODEL --datasets … --first-stage full|bm25 --precision ARM --output OUT/JOB/ARM`` (what a
user runs; ``--backend auto``, so int8 is OpenVINO's static int8, calibrated on what the job serves); an arm whose
eval.json exists is reused. The positional model retrieves from the whole corpus (a dense model; '' for none); each
``--rerank`` model reranks BM25's top ``--depth`` (``MODEL@DEPTH``: that model at its own depth). ``--per-dataset``: one
``ssft-eval`` per dataset and arm, as a user serving one collection runs it (int8 calibrates, and checks its scores, on
that collection's pairs alone), instead of one over every dataset. A table per job: nDCG@10 per dataset and arm, the
difference to fp32, what int8 served as where its check of its own scores chose float
(``ssft.models.interop.openvino.int8_check``), and the worst |difference| of each arm over the datasets, against the
0.005 that the documentation promises.
``--write``: BENCHMARKS.md § int8_collections (``--section`` / ``--title``: another section, for another set of models).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import add_notes_option, add_section_options, command, with_notes, write_section  # noqa: E402

PROMISE = 0.005  # |ΔnDCG@10| against fp32 that docs/export-and-serving.md states for int8
TITLE = "Serving precision on several collections: retrieval and reranking against fp32"


@dataclass(frozen=True)
class Score:
    """An arm's nDCG@10 on one dataset and the precision it was served at (int8's check may choose float)."""
    ndcg: float
    served: str


@dataclass(frozen=True)
class Job:
    """One model served one way: ``first_stage`` full (retrieval) or bm25 (reranking BM25's top ``depth``)."""
    model: str
    first_stage: str
    depth: int
    folder: str  # under --out

    def flags(self) -> list[str]:
        return ["--first-stage", self.first_stage] + (["--depth", str(self.depth)] if self.first_stage == "bm25" else [])

    def heading(self) -> str:
        what = "full retrieval, top 100" if self.first_stage == "full" else f"reranking BM25's top {self.depth}"
        return f"### `{self.model}`: {what}"


def jobs(retrieve: str, rerank: list[str], depth: int) -> list[Job]:
    found = [Job(retrieve, "full", 100, "retrieve")] if retrieve else []
    for i, spec in enumerate(rerank):
        model, at, own = spec.rpartition("@") if "@" in spec else ("", "", spec)
        found.append(Job(model, "bm25", int(own), f"rerank-{i}") if at else Job(spec, "bm25", depth, f"rerank-{i}"))
    return found


def run_arm(job: Job, datasets: list[str], arm: str, out: Path, per_dataset: bool = False) -> dict[str, Score]:
    """``{dataset: Score}`` of ``job``'s model served at precision ``arm`` (ssft-eval; ``per_dataset``: one job each)."""
    scores: dict[str, Score] = {}
    for group in ([[d] for d in datasets] if per_dataset else [datasets]):
        result = out / job.folder / (f"{arm}-{group[0]}" if per_dataset else arm) / "eval.json"
        if not result.is_file():
            cmd = ["ssft-eval", job.model, "--datasets", ",".join(group), *job.flags(), "--precision", arm,
                   "--output", str(result.parent)]
            print("[int8_collections]", " ".join(cmd), flush=True)
            subprocess.run(cmd, check=True)
        data = json.loads(result.read_text())
        served = data.get("precision", arm).rpartition(":")[2]
        scores.update({d["dataset"]: Score(d["model"]["nDCG@10"], served) for d in data["datasets"]})
    return scores


def table(job: Job, datasets: list[str], arms: list[str], scores: dict[str, dict[str, Score]],
          per_dataset: bool = False) -> list[str]:
    given = "--datasets DATASET" if per_dataset else f"--datasets {','.join(datasets)}"
    lines = [job.heading(), "", f"`ssft-eval {job.model} {given} {' '.join(job.flags())} --precision ARM` for each "
             f"arm{' and dataset' if per_dataset else ''}.", "", "| dataset | " + " | ".join(arms) + " |",
             "|---|" + "---:|" * len(arms)]
    for d in datasets:
        ref = scores["fp32"][d].ndcg if "fp32" in scores else None
        cells = [f"{scores[a][d].ndcg:.4f}" + ("" if ref is None or a == "fp32" else f" ({scores[a][d].ndcg - ref:+.4f})")
                 + ("" if scores[a][d].served == a else f", served {scores[a][d].served}") for a in arms]
        lines.append(f"| {d} | " + " | ".join(cells) + " |")
    if "fp32" in scores:
        lines.append("")
        for a in arms:
            if a == "fp32":
                continue
            worst = max(abs(scores[a][d].ndcg - scores["fp32"][d].ndcg) for d in datasets)
            lines.append(f"- {a}: worst |ΔnDCG@10| {worst:.4f} over {len(datasets)} collections "
                         f"({'within' if worst <= PROMISE else 'beyond'} {PROMISE})")
    return lines + [""]


def markdown(datasets: list[str], arms: list[str], results: list[tuple[Job, dict[str, dict[str, Score]]]],
             cmd: str, title: str = TITLE, per_dataset: bool = False) -> str:
    lines = [f"## {title}", "", f"`{cmd}`", "",
             "Each arm is `ssft-eval` as a user runs it (`--backend auto`: int8 is OpenVINO's static int8, calibrated on "
             "what the job serves); nDCG@10 of all the judged test queries, the difference to fp32 in brackets; "
             "\"served bf16\": int8's check of its own scores found them too far from float and served bf16.", ""]
    for job, scores in results:
        lines += table(job, datasets, arms, scores, per_dataset)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", help="a dense model that retrieves from the whole corpus ('' for none): what ssft-eval "
                                 "takes, a run folder, a saved model, a checkpoint")
    p.add_argument("--rerank", default="", help="comma-separated models that rerank BM25's top --depth")
    p.add_argument("--depth", type=int, default=100)
    p.add_argument("--datasets", default="scifact,nfcorpus,cranfield")
    p.add_argument("--arms", default="fp32,bf16,int8")
    p.add_argument("--per-dataset", action="store_true", help="one ssft-eval per dataset and arm (module docstring)")
    p.add_argument("--out", default="runs/bench/int8_collections")
    add_notes_option(p)
    p.add_argument("--write", action="store_true")
    add_section_options(p, "int8_collections", TITLE)
    a = p.parse_args(argv)
    datasets = [d for d in a.datasets.split(",") if d]
    arms = [x for x in a.arms.split(",") if x]
    results = [(job, {arm: run_arm(job, datasets, arm, Path(a.out), a.per_dataset) for arm in arms})
               for job in jobs(a.model, [m for m in a.rerank.split(",") if m], a.depth)]
    body = with_notes(markdown(datasets, arms, results, command(), a.title, a.per_dataset), a.notes)
    print(body)
    if a.write:
        write_section(a.section, body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

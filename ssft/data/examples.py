"""Training examples (query, positive, negatives) and rerank pairs, with their collators."""
from __future__ import annotations

import random
from dataclasses import dataclass

import torch
from torch.utils.data import Dataset

from ssft.core.errors import SsftError
from ssft.data.beir import IRDataset, Qrels
from ssft.data.trec import Run


def subsample_queries(qrels: Qrels, limit: int | None, seed: int) -> Qrels:
    """Keep ``limit`` queries picked at random (fixed seed), or all."""
    if limit is None or limit >= len(qrels):
        return qrels
    keep = sorted(random.Random(seed).sample(sorted(qrels), limit))
    return {q: qrels[q] for q in keep}


def sample_corpus(dataset: IRDataset, keep: set[str], limit: int, seed: int) -> IRDataset:
    """A copy of ``dataset`` whose corpus is ``keep`` (documents that must stay: those judged for the run's queries)
    plus documents drawn at random (fixed seed) up to ``limit`` in all (``IRDataset.with_corpus``); ``dataset``
    itself is unchanged."""
    if len(dataset.corpus) <= limit:
        return dataset
    kept = {d for d in keep if d in dataset.corpus}
    others = sorted(set(dataset.corpus) - kept)
    kept.update(random.Random(seed).sample(others, max(0, min(limit - len(kept), len(others)))))
    return dataset.with_corpus(kept)


def judged_documents(*tables: Qrels | None) -> set[str]:
    """Every document judged (any grade) in ``tables``."""
    return {d for table in tables if table for rels in table.values() for d in rels}


@dataclass
class Example:
    qid: str
    positive: str
    negatives: list[str]  # candidate pool; num_negatives are drawn from it per step


def build_examples(
    qrels: Qrels,
    corpus_ids: list[str],
    negatives_run: Run | None,
    min_relevance: int = 1,
    max_positives_per_query: int | None = None,
    seed: int = 0,
) -> list[Example]:
    """One example per (query, relevant document); negatives = the run's top-k minus judged-relevant
    documents (BM25 hard negatives), or, without a run, the whole corpus minus them (random negatives)."""
    rng = random.Random(seed)
    examples = []
    for qid in sorted(qrels):
        rels = qrels[qid]
        positives = sorted(d for d, r in rels.items() if r >= min_relevance)
        if not positives:
            continue
        if max_positives_per_query is not None and len(positives) > max_positives_per_query:
            positives = sorted(rng.sample(positives, max_positives_per_query))
        judged_relevant = {d for d, r in rels.items() if r > 0}
        # an empty pool (no run, or BM25 found only positives) means random negatives (TrainingGroups tops up)
        pool = []
        if negatives_run is not None:
            ranked = sorted(negatives_run.get(qid, {}).items(), key=lambda kv: -kv[1])
            pool = [d for d, _ in ranked if d not in judged_relevant]
        examples.extend(Example(qid, p, pool) for p in positives)
    if not examples:
        raise SsftError("no training examples: no query in the training qrels has a relevant document")
    return examples


class TrainingGroups(Dataset):
    """Item i: the query text with [positive, n negatives]; the negatives are drawn anew each epoch.

    The draw depends on (seed, epoch, i) only, not on a global random state: a run resumed from a checkpoint
    mid-epoch draws the same negatives as one that never stopped (the Trainer calls ``set_epoch``)."""

    def __init__(self, examples: list[Example], dataset: IRDataset, num_negatives: int, seed: int | str = 0):
        self.examples = examples
        self.dataset = dataset
        self.num_negatives = num_negatives
        self.corpus_ids = list(dataset.corpus)
        self.seed = seed
        self.epoch = 0

    def __len__(self) -> int:
        return len(self.examples)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def item_texts(self) -> list[tuple[str, list[str]]]:
        """Per item, its query and the documents it brings this epoch (positive and the negatives drawn for the
        epoch ``set_epoch`` set): what ``training.train_sampling_strategy: group_by_length`` counts in tokens to
        group batches by (``ssft.training.sampling``)."""
        return [(item["query"], list(item["documents"])) for item in (self[i] for i in range(len(self)))]

    def query_texts(self) -> list[str]:
        """The distinct query texts of the items, in item order."""
        return list(dict.fromkeys(self.dataset.queries[ex.qid] for ex in self.examples))

    def _negatives(self, ex: Example, rng: random.Random) -> list[str]:
        pool = ex.negatives
        if len(pool) >= self.num_negatives:
            return rng.sample(pool, self.num_negatives)
        chosen = list(pool)
        while len(chosen) < self.num_negatives:  # random corpus documents top up a short pool
            d = rng.choice(self.corpus_ids)
            if d != ex.positive and d not in chosen:
                chosen.append(d)
        return chosen

    def __getitem__(self, i: int) -> dict:
        ex = self.examples[i]
        rng = random.Random(f"{self.seed}:{self.epoch}:{i}")  # str seeds hash with SHA-512: same in every process
        docs = [ex.positive, *self._negatives(ex, rng)]
        return {"query": self.dataset.queries[ex.qid], "documents": [self.dataset.corpus[d].full_text for d in docs]}


class TextGroups(TrainingGroups):
    """``TrainingGroups`` of a ``data.train`` source in the text form (``ssft.data.hf_sources.TextExample``): the
    texts come with the rows; a row with fewer negatives than ``num_negatives`` is topped up with random
    documents of the recipe's corpus."""

    def query_texts(self) -> list[str]:
        return list(dict.fromkeys(ex.query for ex in self.examples))

    def __getitem__(self, i: int) -> dict:
        ex = self.examples[i]
        rng = random.Random(f"{self.seed}:{self.epoch}:{i}")
        if len(ex.negatives) >= self.num_negatives:
            negatives = rng.sample(ex.negatives, self.num_negatives)
        else:
            negatives = list(ex.negatives)
            while len(negatives) < self.num_negatives:
                text = self.dataset.corpus[rng.choice(self.corpus_ids)].full_text
                if text != ex.positive and text not in negatives:
                    negatives.append(text)
        return {"query": ex.query, "documents": [ex.positive, *negatives]}


class ScoredGroups(TrainingGroups):
    """``TrainingGroups`` of a scored ``data.train`` source (``ssft.data.hf_sources.ScoredExample``: a query's
    document ids with a teacher's scores): each item is the list's first document and ``num_negatives`` others
    drawn anew each epoch, with their teacher scores (``teacher_scores``, what the distillation losses
    ``margin_mse`` / ``listwise_kl`` compare the student's scores with)."""

    def __init__(self, examples: list, dataset: IRDataset, num_negatives: int, seed: int | str = 0, name: str = "data.train"):
        super().__init__(examples, dataset, num_negatives, seed)
        for index, ex in enumerate(examples, start=1):
            if len(ex.document_ids) < 1 + num_negatives:
                row = getattr(ex, "row", 0) or index  # the source's row, also after a subsample
                dropped = getattr(ex, "dropped", 0)
                left = (f" ({dropped} dropped: listed twice, or judged relevant to the query by the training qrels; "
                        f"see the warning logged above)" if dropped else "")
                raise SsftError(f"data.train: {name}: column 'document_ids', row {row}: {len(ex.document_ids)} "
                                f"documents{left}, fewer than 1 + data.num_negatives = {1 + num_negatives} (lower "
                                f"data.num_negatives, or mine with ssft-mine --min-negatives {num_negatives}, which "
                                f"drops shorter rows)")

    def __getitem__(self, i: int) -> dict:
        ex = self.examples[i]
        rng = random.Random(f"{self.seed}:{self.epoch}:{i}")
        picked = [0, *sorted(rng.sample(range(1, len(ex.document_ids)), self.num_negatives))]
        return {"query": self.dataset.queries[ex.qid],
                "documents": [self.dataset.corpus[ex.document_ids[j]].full_text for j in picked],
                "teacher_scores": [ex.scores[j] for j in picked]}


class RankerCollator:
    """Tokenises a batch for a ranker: training groups (query + [positive, negatives...]) are flattened into
    (batch x group) pairs with ``group_size`` set (and ``teacher_scores`` (batch, group) when the items carry
    precomputed teacher scores, ``ScoredGroups``); scoring items (query, document) become plain pairs.
    With a ``teacher`` (``ssft.teachers.in_loop.FrozenTeacher``), training batches also carry the teacher's own
    inputs for the same distinct queries and documents (``teacher_*`` keys)."""

    def __init__(self, ranker, teacher=None):
        self.ranker = ranker
        self.teacher = teacher

    def __call__(self, items: list[dict]) -> dict[str, torch.Tensor]:
        if "documents" in items[0]:
            group = len(items[0]["documents"])
            queries = [it["query"] for it in items for _ in range(group)]
            docs = [d for it in items for d in it["documents"]]
            batch = self.ranker.tokenize(queries, docs)
            batch["group_size"] = torch.tensor(group)
            if "teacher_scores" in items[0]:
                batch["teacher_scores"] = torch.tensor([it["teacher_scores"] for it in items], dtype=torch.float32)
            if self.teacher is not None:
                batch.update(self.teacher.tokenize(queries, docs))
            return batch
        return self.ranker.tokenize([it["query"] for it in items], [it["document"] for it in items])


class PairDataset(Dataset):
    """(query, document) pairs to score, e.g. a first stage's top-k, sorted by characters; ``pairs`` keeps the order
    predictions come back in (``RankingTrainer.score`` batches them by the model's exact token count and writes the
    scores back in this order)."""

    def __init__(self, run: Run, depth: int, dataset: IRDataset, queries: dict[str, str] | None = None):
        queries = queries if queries is not None else dataset.queries
        pairs = []
        for qid in sorted(run):
            ranked = sorted(run[qid].items(), key=lambda kv: (-kv[1], kv[0]))[:depth]
            pairs.extend((qid, did) for did, _ in ranked if did in dataset.corpus)
        self.pairs = sorted(pairs, key=lambda p: len(queries[p[0]]) + len(dataset.corpus[p[1]].full_text))
        self.queries = queries
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, i: int) -> dict:
        qid, did = self.pairs[i]
        return {"query": self.queries[qid], "document": self.dataset.corpus[did].full_text}

    def texts(self) -> tuple[list[str], list[str]]:
        """The query texts and the document texts of the pairs, in the pairs' order."""
        return ([self.queries[q] for q, _ in self.pairs], [self.dataset.corpus[d].full_text for _, d in self.pairs])

    def to_run(self, scores) -> Run:
        if len(scores) != len(self.pairs):
            raise ValueError(f"{len(scores)} scores for {len(self.pairs)} pairs")
        run: Run = {}
        for (qid, did), s in zip(self.pairs, scores):
            run.setdefault(qid, {})[did] = float(s)
        return run

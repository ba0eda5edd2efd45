"""Ambiguous and non-ambiguous queries (001 §5.1, Fig. 3), with pywsd 1.3 over Open English WordNet 2024.

Two rules (``AmbiguityRule.method``):

``senses`` (001 §5.1, the default)
    Only queries of at most ``max_words`` whitespace-separated words are classified (001 takes one-word queries,
    "because a high-confidence ambiguity classification is possible for one-word queries"); longer ones are
    ``excluded``. The word is lower-cased and lemmatised with pywsd's lemmatiser (NLTK POS tag → WordNet
    lemmatiser, Porter stem as fallback), and the query is **ambiguous when WordNet gives its lemma at least
    ``min_senses`` (2) senses** — over every part of speech, or only ``pos`` when set. A query of several words
    (``max_words`` > 1) is first looked up whole (WordNet has collocations such as "domoic acid"); otherwise its
    sense count is that of its most ambiguous non-stopword. Words WordNet does not know (0 senses, e.g. "DHA")
    are ``non-ambiguous`` by the letter of the rule, or ``excluded`` with ``unknown="excluded"``.

``confidence`` (an alternative: how sure a word-sense disambiguator is)
    pywsd's simple Lesk scores every sense of the lemma against a context — the query itself plus an optional
    context text per query (e.g. the titles of its first-stage top documents, ``first_stage_contexts``) — and
    normalises the overlaps to shares. The **sense confidence** is the share of the best sense (1.0 for a word
    with one sense; 1/senses when no sense overlaps the context at all). The query is ambiguous when the
    confidence is at most ``confidence_threshold`` (0.5: no sense takes more than half of the evidence; a
    two-sense word whose senses tie is ambiguous).

WordNet and NLTK data are found as ``ssft.analysis.wordnet`` describes (env vars ``SSFT_WORDNET_XML``,
``WN_DATA_DIR``, ``NLTK_DATA``); nothing is downloaded.

CLI: ``ssft-ambiguity nfcorpus --split test_short [--method confidence] [--out labels.tsv]``
prints the count of each class (and of the one-word subset) and writes one row per query.
"""
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from ssft.analysis.wordnet import load_wordnet, setup
from ssft.core.errors import SsftError
from ssft.core.io import atomic_write_text
from ssft.firststage.bm25 import BM25

AMBIGUOUS, NON_AMBIGUOUS, EXCLUDED = "ambiguous", "non-ambiguous", "excluded"
LABELS = (AMBIGUOUS, NON_AMBIGUOUS, EXCLUDED)
METHODS = ("senses", "confidence")
POS_TAGS = ("n", "v", "a", "r", "s")


@dataclass
class AmbiguityRule:
    method: str = "senses"  # senses (001 §5.1) | confidence (pywsd Lesk sense confidence)
    max_words: int = 1  # 001 classifies one-word queries only; longer queries are excluded
    min_senses: int = 2  # senses: ambiguous with at least this many WordNet senses (ssft's reading of 001 §5.1, not its words)
    pos: str | None = None  # count senses of this part of speech only (n, v, a, r, s); None: all
    confidence_threshold: float = 0.5  # confidence: ambiguous when the best sense's share is at most this
    unknown: str = NON_AMBIGUOUS  # label of words WordNet does not know: non-ambiguous | excluded

    def check(self) -> None:
        if self.method not in METHODS:
            raise SsftError(f"ambiguity rule: method must be one of {', '.join(METHODS)}, got '{self.method}'")
        if self.max_words < 1:
            raise SsftError("ambiguity rule: max_words must be >= 1")
        if self.min_senses < 2:
            raise SsftError("ambiguity rule: min_senses must be >= 2 (a word with one sense is not ambiguous)")
        if self.pos is not None and self.pos not in POS_TAGS:
            raise SsftError(f"ambiguity rule: pos must be one of {', '.join(POS_TAGS)} or null, got '{self.pos}'")
        if not 0.0 < self.confidence_threshold < 1.0:
            raise SsftError("ambiguity rule: confidence_threshold must be in (0, 1) (a one-sense word has confidence 1)")
        if self.unknown not in (NON_AMBIGUOUS, EXCLUDED):
            raise SsftError(f"ambiguity rule: unknown must be '{NON_AMBIGUOUS}' or '{EXCLUDED}', got '{self.unknown}'")


@dataclass
class QueryAmbiguity:
    query_id: str
    text: str
    words: int  # whitespace tokens
    lemma: str  # the WordNet entry looked up ('' for excluded queries)
    senses: int  # its number of WordNet senses
    confidence: float | None  # best sense's share under the confidence rule, else None
    label: str


_EDGE_PUNCT = re.compile(r"^[^\w]+|[^\w]+$")


def query_words(text: str) -> list[str]:
    """Whitespace tokens with surrounding punctuation stripped ("Alzheimer's?" → "Alzheimer's"); empty ones dropped."""
    return [w for w in (_EDGE_PUNCT.sub("", t) for t in text.split()) if w]


def lemma_of(word: str) -> str:
    """pywsd's lemmatiser on the lower-cased word: the WordNet lemma, else the Porter stem when WordNet knows it,
    else the word."""
    from pywsd.utils import lemmatize  # noqa: PLC0415  (heavy optional library, loaded on first use)

    return lemmatize(word.lower())


def sense_count(lexicon, lemma: str, pos: str | None = None) -> int:
    return len(lexicon.synsets(lemma, pos=pos))


def _entry(lexicon, words: list[str], pos: str | None) -> tuple[str, int]:
    """(lemma, senses) of a query's words: the whole phrase when WordNet has it, else the non-stopword with the
    most senses."""
    if len(words) > 1:
        phrase = " ".join(w.lower() for w in words)
        n = sense_count(lexicon, phrase, pos)
        if n:
            return phrase, n
    from pywsd.stopwords import stopwords  # noqa: PLC0415  (heavy optional library, loaded on first use)

    best = ("", 0)
    for word in words:
        if word.lower() in stopwords:
            continue
        lemma = lemma_of(word)
        n = sense_count(lexicon, lemma, pos)
        if n > best[1] or not best[0]:
            best = (lemma, n)
    return best


def sense_confidence(lemma: str, context: str, pos: str | None = None) -> float:
    """Share of the best sense in pywsd's normalised simple-Lesk overlaps of ``lemma`` with ``context``:
    1.0 for a monosemous word, 1/senses when no sense overlaps the context."""
    from pywsd.lesk import simple_lesk  # noqa: PLC0415  (heavy optional library, loaded on first use)


    n = sense_count(load_wordnet(), lemma, pos)
    if n <= 1:
        return 1.0
    ranked = simple_lesk(context, lemma, pos=pos, nbest=True, keepscore=True, normalizescore=True)
    best = max((score for score, _ in ranked), default=0.0) if ranked else 0.0
    return float(best) if best > 0 else 1.0 / n


def classify_queries(queries: Mapping[str, str], rule: AmbiguityRule | None = None,
                     contexts: Mapping[str, str] | None = None) -> dict[str, QueryAmbiguity]:
    """One ``QueryAmbiguity`` per query. ``contexts`` (query id → text) feeds the confidence rule only."""

    rule = rule or AmbiguityRule()
    rule.check()
    lexicon = setup()
    out: dict[str, QueryAmbiguity] = {}
    for qid, text in queries.items():
        words = query_words(text)
        if not words or len(words) > rule.max_words:
            out[qid] = QueryAmbiguity(qid, text, len(words), "", 0, None, EXCLUDED)
            continue
        lemma, senses = _entry(lexicon, words, rule.pos)
        confidence = None
        if senses == 0:
            label = rule.unknown
        elif rule.method == "senses":
            label = AMBIGUOUS if senses >= rule.min_senses else NON_AMBIGUOUS
        else:
            context = " ".join([text, (contexts or {}).get(qid, "")]).strip()
            confidence = sense_confidence(lemma, context, rule.pos)
            label = AMBIGUOUS if confidence <= rule.confidence_threshold + 1e-9 else NON_AMBIGUOUS
        out[qid] = QueryAmbiguity(qid, text, len(words), lemma, senses, confidence, label)
    return out


def label_counts(results: Mapping[str, QueryAmbiguity]) -> dict[str, int]:
    """Queries per label, every label present (0 when none)."""
    counts = Counter(r.label for r in results.values())
    return {label: counts.get(label, 0) for label in LABELS}


def labels_of(results: Mapping[str, QueryAmbiguity]) -> dict[str, str]:
    """query id → label, the input of ``ssft.analysis.split``."""
    return {qid: r.label for qid, r in results.items()}


def first_stage_contexts(dataset, queries: Mapping[str, str], k: int = 10, field: str = "title") -> dict[str, str]:
    """Context text per query for the confidence rule: the ``field`` (title | text | full_text) of its BM25 top-``k``
    documents."""

    if field not in ("title", "text", "full_text"):
        raise SsftError(f"context field must be title, text or full_text, got '{field}'")
    run = BM25(dataset).search(dict(queries), k)
    ranked = {q: sorted(docs, key=docs.get, reverse=True) for q, docs in run.items()}
    return {q: " ".join(getattr(dataset.corpus[d], field) for d in ranked.get(q, [])) for q in queries}


def write_labels(results: Mapping[str, QueryAmbiguity], path: str | Path) -> None:
    """TSV, one row per query: the ``QueryAmbiguity`` fields."""

    names = [f.name for f in fields(QueryAmbiguity)]
    lines = ["\t".join(names)]
    for r in results.values():
        row = asdict(r)
        row["text"] = " ".join(r.text.split())  # no tabs or newlines inside a cell
        row["confidence"] = "" if r.confidence is None else f"{r.confidence:.4f}"
        lines.append("\t".join(str(row[n]) for n in names))
    atomic_write_text(Path(path), "\n".join(lines) + "\n")


def read_labels(path: str | Path) -> dict[str, str]:
    """query id → label from a ``write_labels`` file."""
    path = Path(path)
    if not path.is_file():
        raise SsftError(f"{path}: no such labels file")
    lines = path.read_text(encoding="utf-8").splitlines()
    if not lines or "query_id" not in lines[0].split("\t") or "label" not in lines[0].split("\t"):
        raise SsftError(f"{path}:1: expected a header with query_id and label columns")
    header = lines[0].split("\t")
    qcol, lcol = header.index("query_id"), header.index("label")
    labels = {}
    for number, line in enumerate(lines[1:], start=2):
        cells = line.split("\t")
        if len(cells) != len(header):
            raise SsftError(f"{path}:{number}: expected {len(header)} tab-separated cells, got {len(cells)}")
        if cells[lcol] not in LABELS:
            raise SsftError(f"{path}:{number}: unknown label '{cells[lcol]}' (expected {', '.join(LABELS)})")
        labels[cells[qcol]] = cells[lcol]
    return labels


def format_counts(results: Mapping[str, QueryAmbiguity], rule: AmbiguityRule) -> str:
    counts = label_counts(results)
    one_word = {q: r for q, r in results.items() if r.words == 1}
    ow = label_counts(one_word)
    unknown = sum(1 for r in results.values() if r.label != EXCLUDED and r.senses == 0)
    lines = [f"rule: {rule.method} (max_words {rule.max_words}, "
             + (f"ambiguous at >= {rule.min_senses} senses" if rule.method == "senses"
                else f"ambiguous when sense confidence <= {rule.confidence_threshold}")
             + f"{', pos ' + rule.pos if rule.pos else ''})",
             f"all {len(results)} queries: " + ", ".join(f"{k} {v}" for k, v in counts.items()),
             f"one-word {len(one_word)} queries: " + ", ".join(f"{k} {v}" for k, v in ow.items() if k != EXCLUDED),
             f"words WordNet does not know (labelled {rule.unknown}): {unknown}"]
    return "\n".join(lines)


__all__ = ["AMBIGUOUS", "EXCLUDED", "NON_AMBIGUOUS", "AmbiguityRule", "QueryAmbiguity", "classify_queries",
           "first_stage_contexts", "label_counts", "labels_of", "lemma_of", "query_words", "read_labels", "sense_confidence",
           "sense_count", "write_labels"]

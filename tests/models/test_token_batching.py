"""Batches by exact token count (``ssft.models.batching``): the token counts are the rows the models build; batched
scores and embeddings equal each item computed alone, in input order, for every architecture; token order pads no
more than character order, and less where characters and tokens disagree; each text is tokenised once."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from ssft.config.recipe import ModelConfig
from ssft.config.registry import MODELS
from ssft.models.batching import length_batches, padded_positions, pair_lengths_of, single_lengths
from ssft.models.corpus import encode_corpus, encode_query_texts, encode_token_corpus
from tests.helpers import move_trainable_weights

# characters and tokens disagree: prose is ~5 characters a token, digits and punctuation ~1
PROSE = ["word " * 12, "word " * 8, "the cat sat on the mat " * 3, "bones"]
NUMBERS = ["1,2;3.4-5" * 5, "7/8:9" * 5, "0.1,0.2" * 3, "3.14159"]
TEXTS = [PROSE[0], NUMBERS[0], PROSE[1], NUMBERS[1], PROSE[2], NUMBERS[2], "", PROSE[3], NUMBERS[3],
         "a long document cut at max_length: " * 20]
QUERIES = ["vitamin d", "1,2,3,4,5,6,7", "what is a bone", "coffee and the heart of the matter"]
ARCHITECTURES = ["cross", "twin", "colbert", "dense"]


@pytest.fixture(scope="module")
def rankers(tiny_model_dir) -> dict:
    out = {}
    for arch in ARCHITECTURES:
        torch.manual_seed(0)
        keys = {"colbert_dim": 16} if arch == "colbert" else {}
        cfg = ModelConfig(architecture=arch, name=str(tiny_model_dir), max_length=32, query_max_length=12, **keys)
        ranker = MODELS.get(arch).build(cfg, "full", {})
        move_trainable_weights(ranker)
        out[arch] = ranker.eval().requires_grad_(False)
    return out


def row_length(batch: dict) -> int:
    """The width of a batch of one text: its row's length."""
    return int(batch["input_ids"].shape[1])


@pytest.mark.parametrize("arch", ["twin", "colbert", "dense"])
def test_token_lengths_are_the_rows_the_model_builds(rankers, arch):
    model = rankers[arch]
    for tower, tokenize in (("query", model.tokenize_queries), ("document", model.tokenize_documents)):
        assert model.token_lengths(TEXTS, tower) == [row_length(tokenize([t])) for t in TEXTS]


def test_pair_lengths_are_the_rows_the_cross_encoder_builds(rankers):
    model = rankers["cross"]
    pairs = [(q, t) for q in QUERIES for t in TEXTS]
    got = model.pair_token_lengths([q for q, _ in pairs], [t for _, t in pairs])
    assert got == [row_length(model.tokenize([q], [t])) for q, t in pairs]
    # without a token cache the tokenizer is called: the same counts
    assert got == pair_lengths_of(model.tokenizer, None, [q for q, _ in pairs], [t for _, t in pairs], model.max_length)
    assert single_lengths(model.tokenizer, None, TEXTS, 32) == single_lengths(model.tokenizer, model.token_cache(), TEXTS, 32)


def test_length_batches_are_longest_first_ties_by_index_every_index_once():
    lengths = [3, 7, 3, 9, 7, 1, 3]
    batches = length_batches(lengths, 3)
    assert batches == [[3, 1, 4], [0, 2, 6], [5]]
    assert length_batches([], 4) == []
    assert padded_positions(lengths, batches) == 3 * 9 + 3 * 3 + 1 * 1


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_batched_scores_equal_each_pair_scored_alone_in_input_order(rankers, arch):
    model = rankers[arch]
    pairs = [(q, t) for q in QUERIES for t in TEXTS]
    alone = np.array([model.predict([p], batch_size=1)[0] for p in pairs])
    np.testing.assert_allclose(model.predict(pairs, batch_size=3), alone, atol=1e-5, rtol=1e-5)
    ranked = model.rank(QUERIES[0], TEXTS, batch_size=4)
    np.testing.assert_allclose([h["score"] for h in sorted(ranked, key=lambda h: h["corpus_id"])], alone[: len(TEXTS)],
                               atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("arch", ["twin", "colbert", "dense"])
def test_batched_embeddings_equal_each_text_encoded_alone_in_input_order(rankers, arch):
    model = rankers[arch]
    for method in (model.encode_query, model.encode_document):
        batched = method(TEXTS, batch_size=3)
        for text, got in zip(TEXTS, batched):
            np.testing.assert_allclose(got, method(text), atol=1e-5)
    if arch == "colbert":
        for got, text in zip(encode_token_corpus(model, TEXTS, batch_size=3), TEXTS):
            np.testing.assert_allclose(got, model.encode_document(text), atol=1e-5)
    else:
        np.testing.assert_allclose(encode_corpus(model, TEXTS, batch_size=3), model.encode_document(TEXTS, batch_size=1),
                                   atol=1e-5)
        np.testing.assert_allclose(encode_query_texts(model, QUERIES, batch_size=3),
                                   model.encode_query(QUERIES, batch_size=1), atol=1e-5)


def test_token_order_pads_less_than_character_order_where_they_disagree(rankers):
    model = rankers["dense"]
    lengths = model.token_lengths(TEXTS, "document")
    by_tokens = length_batches(lengths, 2)
    by_characters = length_batches([len(t) for t in TEXTS], 2)  # what the sort sites used to cut
    assert padded_positions(lengths, by_tokens) < padded_positions(lengths, by_characters)
    # and the count is what the model computes: each batch's input width times its rows
    assert padded_positions(lengths, by_tokens) == sum(
        model.tokenize_documents([TEXTS[i] for i in rows])["input_ids"].numel() for rows in by_tokens)
    # never more, whatever the batch size
    for size in (1, 3, 4, 7):
        assert padded_positions(lengths, length_batches(lengths, size)) <= padded_positions(
            lengths, length_batches([len(t) for t in TEXTS], size))


class CountingTokenizer:
    """Delegates to a tokenizer and counts the texts its batch call is given."""

    def __init__(self, tokenizer):
        self.tokenizer, self.texts = tokenizer, 0

    def __call__(self, texts, *args, **kwargs):
        self.texts += len(texts) if isinstance(texts, list) else 1
        return self.tokenizer(texts, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.tokenizer, name)


@pytest.mark.parametrize("arch", ["cross", "dense"])
def test_each_text_is_tokenised_once(tiny_model_dir, arch):
    torch.manual_seed(0)
    model = MODELS.get(arch).build(ModelConfig(architecture=arch, name=str(tiny_model_dir), max_length=32,
                                               query_max_length=12), "full", {}).eval()
    cache = model.token_cache()
    counting = CountingTokenizer(cache.tokenizer)
    cache.tokenizer = counting
    pairs = [(q, t) for q in QUERIES for t in TEXTS]
    model.predict(pairs, batch_size=3)
    assert counting.texts == len(set(QUERIES) | set(TEXTS))
    model.predict(pairs, batch_size=5)
    assert counting.texts == len(set(QUERIES) | set(TEXTS))  # read from the cache the second time

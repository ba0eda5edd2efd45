"""Speed features: length-grouped training batches, evaluation order kept under them, mixed precision reaching the
model through the recipe's training section (bf16 / fp16 are checked for real on a GPU; here, their plumbing)."""
from __future__ import annotations

import logging

import pytest
import torch

from ssft.core.errors import SsftError
from ssft.data.examples import TrainingGroups
from tests.helpers import write_synthetic_beir
from tests.training.test_trainer import make_trainer


def test_group_by_length_batches_training_groups_by_length(tiny_model_dir, tmp_path):
    from transformers import TrainingArguments

    from ssft.config.recipe import ModelConfig
    from ssft.config.registry import MODELS
    from ssft.data.beir import load_dataset
    from ssft.data.examples import RankerCollator, TrainingGroups, build_examples
    from ssft.losses import ContrastiveLoss
    from ssft.training.sampling import TokenLengthGroupedSampler
    from ssft.training.trainer import RankingTrainer, token_lengths

    ds = load_dataset(str(write_synthetic_beir(tmp_path / "beir", queries=60, docs=80)))
    groups = TrainingGroups(build_examples(ds.qrels("train"), list(ds.corpus), None), ds, 1)
    args = TrainingArguments(output_dir=str(tmp_path / "out"), per_device_train_batch_size=4, report_to=[], use_cpu=True,
                             remove_unused_columns=False, train_sampling_strategy="group_by_length")
    ranker = MODELS.get("dense").build(ModelConfig(architecture="dense", name=str(tiny_model_dir), max_length=32), "full", {})
    trainer = RankingTrainer(model=ranker, args=args, train_dataset=groups, data_collator=RankerCollator(ranker),
                             loss=ContrastiveLoss())
    sampler = trainer._get_train_sampler()
    assert isinstance(sampler, TokenLengthGroupedSampler) and sampler.batch_size == 4
    # grouped by the ranker's tokens (query cut at query_max_length, document at max_length), not characters
    lengths = token_lengths(ranker, groups.item_texts())
    assert sampler.lengths == lengths
    # an item's width: its query, and its documents (positive and this epoch's negative) padded to the longest of them
    query, documents = groups[0]["query"], groups[0]["documents"]
    count = lambda text: len(ranker.tokenizer(text, add_special_tokens=False)["input_ids"])  # noqa: E731
    assert len(documents) == 2
    assert lengths[0] == (min(count(query), ranker.query_max_length)
                          + 2 * max(min(count(d), ranker.max_length) for d in documents))
    assert sorted(sampler) == list(range(len(groups)))


def test_grouping_counts_each_epochs_negatives(tiny_model_dir, tmp_path):
    """The negatives change every epoch (``set_epoch``): the lengths the sampler groups by are read when the epoch
    starts, so they follow them."""
    from ssft.config.recipe import ModelConfig
    from ssft.config.registry import MODELS
    from ssft.data.beir import load_dataset
    from ssft.data.examples import TrainingGroups, build_examples
    from ssft.training.sampling import TokenLengthGroupedSampler, token_lengths

    ds = load_dataset(str(write_synthetic_beir(tmp_path / "beir", queries=40, docs=80)))
    groups = TrainingGroups(build_examples(ds.qrels("train"), list(ds.corpus), None), ds, 2)
    ranker = MODELS.get("dense").build(ModelConfig(architecture="dense", name=str(tiny_model_dir), max_length=32), "full", {})
    sampler = TokenLengthGroupedSampler(lambda: token_lengths(ranker, groups.item_texts()), 4, size=len(groups))
    epoch0 = [groups[i]["documents"] for i in range(len(groups))]
    assert sampler.lengths == token_lengths(ranker, [(groups[i]["query"], epoch0[i]) for i in range(len(groups))])
    groups.set_epoch(1)
    epoch1 = [groups[i]["documents"] for i in range(len(groups))]
    assert epoch1 != epoch0
    assert sampler.lengths == token_lengths(ranker, [(groups[i]["query"], epoch1[i]) for i in range(len(groups))])


def test_counting_an_epochs_tokens_says_so_before_the_first_step(caplog):
    from ssft.training.sampling import TokenLengthGroupedSampler

    sampler = TokenLengthGroupedSampler(lambda: [3, 1, 2, 5], 2, size=4, seed=0)
    sampler.set_epoch(2)
    with caplog.at_level(logging.INFO, logger="ssft.training.sampling"):
        batches = sampler.batches()
    assert sorted(i for b in batches for i in b) == [0, 1, 2, 3]
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0] == "grouping batches by token count: counting the tokens of 4 training items (epoch 2)"
    assert lines[1].startswith("grouping batches by token count: 4 items counted in ")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="ssft.training.sampling"):
        TokenLengthGroupedSampler([3, 1, 2, 5], 2, seed=0).batches()  # lengths given: nothing to count
    assert not caplog.records


def _lengths(n: int = 203, seed: int = 0) -> list[int]:
    import random

    rng = random.Random(seed)
    return [rng.randint(3, 300) for _ in range(n)]


def test_token_grouped_batches_are_length_bands_in_a_shuffled_order():
    """One window (fewer items than 50 batches): the batches are the items sorted by length cut every 8, the one
    holding the longest item first, the partial batch last, and the others in an order that is not longest to
    shortest (transformers' LengthGroupedSampler would run the whole epoch from the longest items to the shortest)."""
    from ssft.training.sampling import TokenLengthGroupedSampler

    lengths = _lengths()
    generator = torch.Generator().manual_seed(3)
    batches = TokenLengthGroupedSampler(lengths, 8, generator=generator).batches()
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    assert [len(b) for b in batches] == [8] * 25 + [3]
    bands = sorted(tuple(sorted(lengths[i] for i in b)) for b in batches)
    by_length = sorted(lengths, reverse=True)
    expected = sorted(tuple(sorted(by_length[i : i + 8])) for i in range(0, len(lengths), 8))
    assert bands == expected
    assert max(lengths[i] for i in batches[0]) == max(lengths)
    assert sorted(lengths[i] for i in batches[-1]) == sorted(lengths)[:3]
    heads = [max(lengths[i] for i in b) for b in batches[1:-1]]
    assert heads != sorted(heads, reverse=True)


def test_token_grouped_epochs_follow_torch_seed_and_each_window_is_grouped():
    from ssft.training.sampling import TokenLengthGroupedSampler

    lengths = _lengths(1000)
    sampler = TokenLengthGroupedSampler(lengths, 4, window_batches=10)  # windows of 40 items
    torch.manual_seed(7)
    first = list(sampler)
    torch.manual_seed(7)
    assert list(sampler) == first  # the same seed, the same epoch: what an exact resume replays
    second = list(sampler)
    assert second != first and sorted(second) == sorted(first) == list(range(1000))
    # grouped within windows: far less spread inside a batch than in a shuffled batch of 4
    spread = lambda order: sum(max(lengths[i] for i in order[k : k + 4]) - min(lengths[i] for i in order[k : k + 4])  # noqa: E731
                               for k in range(0, len(order), 4))
    shuffled = torch.randperm(1000, generator=torch.Generator().manual_seed(0)).tolist()
    assert spread(first) < 0.25 * spread(shuffled)


def test_a_seeded_token_grouped_sampler_replays_each_epoch_whatever_the_global_generator():
    """With a seed, an epoch's order depends on (seed, epoch) only: a run resumed mid-epoch (the global generator
    restored to its state at the checkpoint, not at the epoch's start) replays the same batches."""
    from ssft.training.sampling import TokenLengthGroupedSampler

    lengths = _lengths(300)
    sampler = TokenLengthGroupedSampler(lengths, 4, seed=42)
    sampler.set_epoch(1)
    torch.manual_seed(0)
    first = list(sampler)
    torch.manual_seed(123)
    assert list(sampler) == first
    sampler.set_epoch(2)
    assert list(sampler) != first and sorted(sampler) == list(range(300))


def test_token_grouped_sampler_refuses_an_empty_batch():
    from ssft.training.sampling import TokenLengthGroupedSampler

    with pytest.raises(ValueError, match="batch_size"):
        TokenLengthGroupedSampler([1, 2], 0)


class _VariedItems(TrainingGroups):
    """Training items whose documents run from 1 to 40 words: what grouping by tokens is for (training groups, the
    type whose items the trainer groups, with items of its own)."""

    def __init__(self, n: int = 96):  # no dataset behind these items: TrainingGroups' own state is not set
        import random

        rng = random.Random(0)
        self.items = [("vitamin d", " ".join(["bone"] * rng.randint(1, 40))) for _ in range(n)]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict:
        return {"query": self.items[i][0], "documents": [self.items[i][1]]}

    def item_texts(self) -> list[tuple[str, str]]:
        return list(self.items)


def test_grouping_by_tokens_sees_each_example_once_and_pads_less(tiny_model_dir, tmp_path):
    """An epoch under ``group_by_length`` holds the same examples as the default shuffled one (each once), and its
    batches compute fewer padded token positions."""
    from transformers import TrainingArguments

    from ssft.config.recipe import ModelConfig
    from ssft.config.registry import MODELS
    from ssft.data.examples import RankerCollator
    from ssft.losses import ContrastiveLoss
    from ssft.training.trainer import RankingTrainer, token_lengths

    ranker = MODELS.get("dense").build(ModelConfig(architecture="dense", name=str(tiny_model_dir), max_length=32), "full", {})
    items = _VariedItems()
    lengths = token_lengths(ranker, items.item_texts())
    assert len(set(lengths)) > 10

    def batches(strategy: str) -> list[list[int]]:
        args = TrainingArguments(output_dir=str(tmp_path / strategy), per_device_train_batch_size=8, report_to=[],
                                 use_cpu=True, remove_unused_columns=False, train_sampling_strategy=strategy)
        trainer = RankingTrainer(model=ranker, args=args, train_dataset=items, data_collator=RankerCollator(ranker),
                                 loss=ContrastiveLoss())
        order = list(trainer._get_train_sampler())
        return [order[i : i + 8] for i in range(0, len(order), 8)]

    grouped, shuffled = batches("group_by_length"), batches("random")
    assert sorted(i for b in grouped for i in b) == sorted(i for b in shuffled for i in b) == list(range(len(items)))
    padded = lambda bs: sum(len(b) * max(lengths[i] for i in b) for b in bs)  # noqa: E731
    assert padded(grouped) < 0.8 * padded(shuffled)


def test_predictions_keep_pair_order_under_group_by_length(tiny_model_dir, tiny_dataset, tmp_path):
    trainer, ranker, ds = make_trainer(tiny_model_dir, tiny_dataset, tmp_path, train_sampling_strategy="group_by_length")
    ranker.eval()
    pairs = trainer.eval_dataset
    scores = trainer.predict(pairs).predictions
    with torch.no_grad():
        direct = ranker(**ranker.tokenize([ds.queries[q] for q, _ in pairs.pairs],
                                          [ds.corpus[d].full_text for _, d in pairs.pairs]))
    torch.testing.assert_close(torch.as_tensor(scores), direct.float(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_from_the_recipe_reaches_the_forward(tiny_model_dir, tiny_dataset, tmp_path, precision):
    """``training.bf16`` / ``training.fp16`` of a recipe pass to TrainingArguments and accelerate, whose autocast
    wraps the ranker's forward during training: the backbone's matmuls run in the half type (fp16: on a GPU), the
    loss is finite and the master weights stay float32."""
    from ssft.config.recipe import recipe_from_dict

    recipe = recipe_from_dict({"training": {precision: "true", "use_cpu": True, "output_dir": str(tmp_path)}}, "r.yaml")
    assert recipe.training[precision] is True  # coerced to a bool from the YAML string
    half = torch.bfloat16 if precision == "bf16" else torch.float16
    trainer, ranker, _ = make_trainer(tiny_model_dir, tiny_dataset, tmp_path, max_steps=1, **{precision: True})
    assert trainer.accelerator.mixed_precision == precision
    seen = []
    layer = ranker.backbone.model.base_model.model.encoder.layer[0].attention.self.query  # a LoRA-wrapped linear
    handle = layer.register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    try:
        output = trainer.train()
    finally:
        handle.remove()
    if precision == "bf16" or torch.cuda.is_available():
        assert seen and all(dtype == half for dtype in seen)
    else:  # accelerate autocasts fp16 on accelerators only; on a CPU the step runs in float32 (ssft-train warns)
        assert seen and all(dtype == torch.float32 for dtype in seen)
    assert output.training_loss == output.training_loss  # finite (a NaN would have stopped training)
    assert all(p.dtype == torch.float32 for p in ranker.parameters())


def test_bf16_on_a_cpu_without_native_bf16_trains_with_a_warning(tmp_path, monkeypatch, caplog):
    """training.bf16 on a CPU works; where the CPU only emulates bf16 the
    run says it is likely slower than float32, before anything is written."""
    from ssft.config.recipe import recipe_from_dict
    from ssft.core import precision
    from ssft.pipeline.folder import train_output_folder
    from ssft.pipeline.run import prepare

    if torch.cuda.is_available():
        pytest.skip("a GPU is present: bf16 is supported")
    recipe = recipe_from_dict({"training": {"bf16": True, "output_dir": str(tmp_path / "out")},
                               "data": {"dataset": str(write_synthetic_beir(tmp_path / "beir"))}}, "r.yaml")
    for native in (False, True):
        monkeypatch.setattr(precision, "cpu_bf16_native", lambda native=native: native)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="ssft"):
            plan = prepare(recipe, train_output_folder(tmp_path / "out"), overwrite=False, resume_with_changes=False)
        assert plan.args.bf16 and plan.args.use_cpu
        assert ("emulates" in caplog.text) is not native
    assert not (tmp_path / "out").exists()


def test_training_bf16_auto_follows_the_hardware(tmp_path, monkeypatch, caplog):
    """training.bf16: auto trains in bf16 where the device computes it natively and in float32 elsewhere (never
    the emulated, slower bf16), and says which; a value other than true / false / auto is a one-line error."""
    from ssft.config.recipe import recipe_from_dict
    from ssft.core import precision
    from ssft.pipeline.folder import train_output_folder
    from ssft.pipeline.run import prepare

    if torch.cuda.is_available():
        pytest.skip("checks the CPU path")
    recipe = recipe_from_dict({"training": {"bf16": "Auto", "output_dir": str(tmp_path / "out")},
                               "data": {"dataset": str(write_synthetic_beir(tmp_path / "beir"))}}, "r.yaml")
    assert recipe.training["bf16"] == "auto"
    for native in (True, False):
        monkeypatch.setattr(precision, "cpu_bf16_native", lambda native=native: native)
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="ssft"):
            plan = prepare(recipe, train_output_folder(tmp_path / "out"), overwrite=False, resume_with_changes=False)
        assert plan.args.bf16 is native and bool(plan.args.use_cpu) is native
        assert ("bf16 mixed precision" if native else "float32 (training.bf16: auto, no native bf16") in plan.precision_note
        assert "emulates" not in caplog.text
    assert recipe.training["bf16"] == "auto"  # resolved per run, not written back into the recipe
    with pytest.raises(SsftError, match=r"^r.yaml: training.bf16: expected true/false, got 'maybe' \(or auto"):
        recipe_from_dict({"training": {"bf16": "maybe"}}, "r.yaml")


def test_training_precision_defaults_to_auto_unless_named(tmp_path, monkeypatch):
    """With no training.bf16 / training.fp16 in the recipe and no mixed precision in the accelerate config, a run
    trains as training.bf16: auto would; a recipe's false, or an accelerate config's fp16, is left to rule."""
    from ssft.config.recipe import recipe_from_dict
    from ssft.core import precision
    from ssft.pipeline.folder import train_output_folder
    from ssft.pipeline.run import prepare, training_precision

    if torch.cuda.is_available():
        pytest.skip("checks the CPU path")
    data = {"dataset": str(write_synthetic_beir(tmp_path / "beir"))}

    def plan_of(training: dict):
        recipe = recipe_from_dict({"training": {"output_dir": str(tmp_path / "out"), **training}, "data": data}, "r.yaml")
        return prepare(recipe, train_output_folder(tmp_path / "out"), overwrite=False, resume_with_changes=False)

    monkeypatch.delenv("ACCELERATE_MIXED_PRECISION", raising=False)
    for native in (True, False):
        monkeypatch.setattr(precision, "cpu_bf16_native", lambda native=native: native)
        plan = plan_of({})
        assert plan.args.bf16 is native and training_precision(plan.args) == ("bf16" if native else "fp32")
    monkeypatch.setattr(precision, "cpu_bf16_native", lambda: True)
    assert plan_of({"bf16": False}).args.bf16 is False
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "fp16")  # what accelerate launch exports from its config
    plan = plan_of({})
    assert plan.args.bf16 is False and training_precision(plan.args) == "fp32"  # fp16 autocasts on GPUs only


def test_a_resumed_run_keeps_the_training_precision_of_its_checkpoint(tmp_path, monkeypatch):
    """training.bf16: auto resumes in the precision the checkpoint was trained in (exact resume, also on another
    machine); a checkpoint written before checkpoints recorded it, of a recipe that left training.bf16 out, trained in
    float32 — the default then."""
    import json

    from ssft.config.recipe import recipe_from_dict
    from ssft.core import precision
    from ssft.pipeline import run as run_module
    from ssft.pipeline.folder import train_output_folder

    if torch.cuda.is_available():
        pytest.skip("checks the CPU path")
    monkeypatch.delenv("ACCELERATE_MIXED_PRECISION", raising=False)
    monkeypatch.setattr(run_module, "run_folder_state", lambda *args: ("resume", []))
    data = {"dataset": str(write_synthetic_beir(tmp_path / "beir"))}
    marker = tmp_path / "out" / "checkpoint-5" / "ssft_checkpoint.json"
    marker.parent.mkdir(parents=True)

    def resumed(recorded: str | None, native: bool, training: dict | None = None):
        marker.write_text(json.dumps({"global_step": 5, "loss_sum": 1.0}
                                     | ({"mixed_precision": recorded} if recorded else {})))
        monkeypatch.setattr(precision, "cpu_bf16_native", lambda: native)
        recipe = recipe_from_dict({"training": {"output_dir": str(tmp_path / "out"), **(training or {})}, "data": data},
                                  "r.yaml")
        return run_module.prepare(recipe, train_output_folder(tmp_path / "out"), overwrite=False,
                                  resume_with_changes=False)

    plan = resumed("no", native=True)
    assert plan.args.bf16 is False and "kept from the checkpoint" in plan.precision_note
    plan = resumed("bf16", native=False)
    assert plan.args.bf16 is True and "unlike this device" in plan.precision_note
    assert resumed(None, native=True).args.bf16 is False  # before the record: float32 was the default
    assert resumed(None, native=True, training={"bf16": "auto"}).args.bf16 is True  # asked for auto: as the device
    assert resumed("no", native=True, training={"bf16": True}).args.bf16 is True  # the recipe's own choice rules


# ---------------------------------------------------------------- tokenisation once per text


def _texts_of(dataset_dir, n: int = 200):
    import random

    from ssft.data.beir import load_dataset

    ds = load_dataset(str(dataset_dir))
    rng = random.Random(0)
    docs = [ds.corpus[d].full_text for d in rng.sample(sorted(ds.corpus), min(n, len(ds.corpus)))]
    queries = [ds.queries[q] for q in rng.sample(sorted(ds.queries), min(n, len(ds.queries)))]
    return queries, docs


def _assert_same(tokenizer, queries, docs, lengths=(12, 16, 33, 64, 128, 256)):
    from ssft.data.tokens import TokenCache

    cache = TokenCache(tokenizer, max(lengths))
    assert cache.supported
    # first texts: queries, and documents (long first texts exercise the split-the-budget case)
    first = (queries + docs)[: len(docs)]
    for max_length in lengths:
        expected = tokenizer(first, docs, padding=True, truncation="longest_first", max_length=max_length, return_tensors="pt")
        got = cache.pairs(first, docs, max_length)
        assert set(got) == set(expected)
        for key in expected:
            assert torch.equal(got[key], expected[key]), (max_length, key)
        expected = tokenizer(docs, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
        got = cache.single(docs, max_length)
        for key in expected:
            assert torch.equal(got[key], expected[key]), (max_length, key)
    assert len(cache) == len(set(first) | set(docs))  # each distinct text tokenised once


def test_pair_lengths_follow_longest_first():
    from ssft.data.tokens import pair_lengths

    assert pair_lengths(3, 4, 10) == (3, 4)  # fits
    assert pair_lengths(3, 20, 10) == (3, 7)  # the longer gives way
    assert pair_lengths(20, 3, 10) == (7, 3)
    assert pair_lengths(8, 9, 11) == (5, 6)  # both too long: halves, the longer text gets the odd token
    assert pair_lengths(9, 8, 11) == (6, 5)
    assert pair_lengths(9, 9, 11) == (5, 6)


def test_token_cache_gives_the_tokenizer_s_inputs(tiny_model_dir, tiny_dataset):
    from transformers import AutoTokenizer

    queries, docs = _texts_of(tiny_dataset)
    _assert_same(AutoTokenizer.from_pretrained(tiny_model_dir), queries, docs, lengths=(8, 9, 12, 16, 33))


@pytest.mark.integration
def test_token_cache_gives_the_tokenizer_s_inputs_on_nfcorpus():
    from transformers import AutoTokenizer

    from ssft.core.hub import resolve_model
    from ssft.data.beir import resolve_dataset

    queries, docs = _texts_of(resolve_dataset("nfcorpus"))
    _assert_same(AutoTokenizer.from_pretrained(resolve_model("sentence-transformers/all-MiniLM-L6-v2")), queries, docs)


def test_rankers_tokenise_each_text_once(tiny_model_dir):
    from ssft.config.recipe import ModelConfig
    from ssft.config.registry import MODELS

    for family in ("cross", "twin", "colbert", "dense"):
        options = {"colbert_dim": 8} if family == "colbert" else {}  # a key of another architecture is refused
        ranker = MODELS.get(family).build(ModelConfig(architecture=family, name=str(tiny_model_dir), max_length=32,
                                                      query_max_length=8, **options), "full", {})
        calls = []
        original = ranker.tokenizer.__class__.__call__

        def counting(self, *args, **kwargs):
            calls.append(args[0] if args else kwargs.get("text"))
            return original(self, *args, **kwargs)

        ranker.tokenize(["vitamin d"], ["bone health"])  # warm: templates read, texts stored
        ranker.tokenizer.__class__.__call__ = counting
        try:
            again = ranker.tokenize(["vitamin d"], ["bone health"])
            assert calls == [], family  # the same texts again: nothing goes through the tokenizer
            ranker.tokenize(["coffee"], ["bone health"])
            assert calls == [["coffee"]], family  # only the new text does
        finally:
            ranker.tokenizer.__class__.__call__ = original
        assert again[next(iter(again))].shape[0] == 1


def test_a_cross_encoder_scores_in_batches_by_token_count_and_answers_in_the_pairs_order(tiny_model_dir, tmp_path,
                                                                                         monkeypatch):
    """``RankingTrainer.score`` cuts batches in exact token order (each batch pads to about its own length), not the
    pairs' character order, and hands the scores back in the pairs' order, equal to scoring each pair alone."""
    from ssft.data.beir import load_dataset
    from ssft.data.examples import PairDataset
    from ssft.models.batching import length_batches, padded_positions
    from ssft.training.prediction import prediction_trainer
    from ssft.training.trainer import token_order

    trainer, ranker, _ = make_trainer(tiny_model_dir, write_synthetic_beir(tmp_path / "beir", queries=8, docs=40),
                                      tmp_path)
    ds = load_dataset(str(tmp_path / "beir"))
    ranker.eval()
    pairs = PairDataset({q: {d: 1.0 for d in ds.corpus} for q in sorted(ds.queries)[:3]}, 40, ds)
    lengths = ranker.pair_token_lengths(*pairs.texts())
    seen: list[int] = []  # each batch's padded width, in the order the collator builds them
    tokenize = ranker.tokenize

    def recording(*args, **kwargs):
        batch = tokenize(*args, **kwargs)
        seen.append(batch["input_ids"].shape[1])
        return batch

    monkeypatch.setattr(ranker, "tokenize", recording)
    scores = prediction_trainer(ranker, batch_size=8, precision="fp32").score(pairs)
    monkeypatch.undo()
    order = token_order(ranker, pairs)
    assert [lengths[i] for i in order] == sorted(lengths, reverse=True)
    assert seen == [max(lengths[i] for i in rows) for rows in length_batches(lengths, 8)]
    # fewer padded positions than the characters' order the pairs are kept in (the synthetic texts vary in length)
    by_characters = [list(range(i, min(i + 8, len(pairs)))) for i in range(0, len(pairs), 8)]
    assert padded_positions(lengths, length_batches(lengths, 8)) < padded_positions(lengths, by_characters)
    with torch.no_grad():
        alone = torch.cat([ranker(**ranker.tokenize([q], [d])).float().reshape(-1) for q, d in zip(*pairs.texts())])
    torch.testing.assert_close(torch.as_tensor(scores).reshape(-1), alone, rtol=1e-4, atol=1e-5)

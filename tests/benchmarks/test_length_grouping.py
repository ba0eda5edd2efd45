"""benchmarks/length_grouping.py: the padding count against a count by hand, and one epoch per strategy."""
from __future__ import annotations

import json
import math
import random
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import length_grouping  # noqa: E402


def _varied_beir(root: Path, queries: int = 24) -> Path:
    """Documents of 1 to 40 words (what grouping is for); each query judged relevant to one document."""
    rng = random.Random(0)
    words = ["vitamin", "bone", "statin", "heart", "fish", "oil", "sugar", "sleep", "memory", "coffee"]
    (root / "qrels").mkdir(parents=True)
    docs = {f"d{i}": " ".join(rng.choices(words, k=rng.randint(1, 40))) for i in range(60)}
    (root / "corpus.jsonl").write_text("".join(json.dumps({"_id": d, "title": "", "text": t}) + "\n" for d, t in docs.items()))
    (root / "queries.jsonl").write_text("".join(json.dumps({"_id": f"q{i}", "text": " ".join(rng.choices(words, k=2))}) + "\n"
                                                for i in range(queries + 6)))
    for split, ids in (("train", range(queries)), ("test", range(queries, queries + 6))):
        (root / "qrels" / f"{split}.tsv").write_text("query-id\tcorpus-id\tscore\n"
                                                     + "".join(f"q{i}\td{i}\t1\n" for i in ids))
    return root


def _recipe(tmp_path: Path, model: Path) -> Path:
    data = _varied_beir(tmp_path / "beir")
    path = tmp_path / "r.yaml"
    path.write_text(f"model: {{architecture: dense, name: {model}, max_length: 32, query_max_length: 8}}\n"
                    f"adapter: full\nloss: contrastive\n"
                    f"data: {{dataset: {data}, validation_split: null, negatives: random, num_negatives: 1}}\n"
                    f"training: {{per_device_train_batch_size: 4, learning_rate: 1.0e-4}}\n")
    return path


def test_padding_counts_what_a_bi_encoder_pads_to(tiny_model_dir, tmp_path, monkeypatch):
    recipe = _recipe(tmp_path, tiny_model_dir)
    case = length_grouping.padding_case(str(recipe), 32)
    assert case["items"] == 24 and case["documents_per_item"] == 2 and case["batch"] == 4
    # needed: every query and document's own tokens, cut where the model cuts them, counted here by the tokenizer
    from transformers import AutoTokenizer

    from ssft.config.recipe import load_recipe
    from ssft.pipeline.build import training_source
    from ssft.pipeline.inputs import load_inputs

    r = load_recipe(recipe, ["model.max_length=32"])
    groups = training_source(r, load_inputs(r)).training_set(r.data.sample_seed)
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    count = lambda text, cut: min(len(tokenizer(text, add_special_tokens=False)["input_ids"]), cut)  # noqa: E731
    needed = sum(count(groups[i]["query"], 8) + sum(count(d, 32) for d in groups[i]["documents"])
                 for i in range(len(groups)))
    assert case["needed"] == needed
    assert needed < case["grouped"] < case["random"]
    text = length_grouping.markdown({"padding": [case], "speed": []}, "cmd")
    assert f"| {needed:,} | {case['random']:,} (" in text


def test_one_epoch_per_strategy_sees_every_item(tiny_model_dir, tmp_path):
    recipe = _recipe(tmp_path, tiny_model_dir)
    for arm in length_grouping.ARMS:
        timing = length_grouping.epoch_seconds(str(recipe), 32, arm, tmp_path / arm)
        assert timing["steps"] == math.ceil(24 / 4) and timing["cpu"] > 0


def test_sentence_transformers_trains_the_same_items_in_as_many_steps(tiny_model_dir, tmp_path):
    recipe = _recipe(tmp_path, tiny_model_dir)
    timing = length_grouping.st_epoch_seconds(str(recipe), 32, tmp_path / "st")
    assert timing["steps"] == math.ceil(24 / 4) and timing["cpu"] > 0
    case = length_grouping.speed_case(str(recipe), 32, 1, tmp_path / "speed", st=True)
    assert set(case["times"]) == {*length_grouping.ARMS, length_grouping.ST_ARM}
    text = length_grouping.markdown({"padding": [], "speed": [case]}, "cmd")
    ratio = case[length_grouping.ST_ARM] / case["group_by_length"]
    assert f"| {case[length_grouping.ST_ARM]:.1f} | {ratio:.2f}× |" in text


def test_sentence_transformers_is_refused_for_a_recipe_it_has_no_counterpart_for(tiny_model_dir, tmp_path):
    recipe = _recipe(tmp_path, tiny_model_dir)
    recipe.write_text(recipe.read_text().replace("adapter: full", "adapter: lora"))
    with pytest.raises(SystemExit, match="adapter: full"):
        length_grouping.st_epoch_seconds(str(recipe), 32, tmp_path / "st")


def test_a_quality_case_at_a_length_trains_there_and_reports_it(tmp_path, monkeypatch):
    """``recipe:tokens`` trains each arm with model.max_length overridden, and its table says at what length."""
    seen = []

    def run(command, stdout, stderr):
        seen.append(command)
        return type("Done", (), {"returncode": 0})()

    monkeypatch.setattr(length_grouping.subprocess, "run", run)
    length_grouping.trained("r.yaml", 43, "random", tmp_path, None, ("model.max_length=512",))
    assert seen == [["ssft-train", "r.yaml", "seed=43", f"training.output_dir={tmp_path / 'random' / 'seed-43'}",
                     "training.train_sampling_strategy=random", "model.max_length=512"]]
    arm = {"scores": [0.70, 0.72], "cpu_seconds": [100.0, 110.0]}
    case = {"recipe": "r.yaml", "max_length": 512, "seeds": [42, 43], "arms": {"random": arm, "group_by_length": arm},
            "queries": 300, "p": 0.5}
    text = length_grouping.markdown({"padding": [], "speed": [], "quality": [case]}, "cmd")
    assert "### `r.yaml` at 512 document tokens trained with each strategy (seeds 42, 43)" in text
    assert "| `group_by_length` | 0.7100 ± 0.0141 | 105 ± 7 |" in text and "p = 0.5." in text

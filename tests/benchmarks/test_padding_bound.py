"""benchmarks/padding_bound.py: the FLOP arithmetic of a [CLS]-only last layer against hand-computed cases, and bad
lengths refused when the command line is parsed."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from padding_bound import first_token_last_layer_flops, main  # noqa: E402
from vs_sentence_transformers import flops_per_row  # noqa: E402

CONFIG = {"hidden_size": 4, "intermediate_size": 8, "num_hidden_layers": 2}


def test_one_token_costs_the_same_either_way():
    assert first_token_last_layer_flops(1, CONFIG) == flops_per_row(1, CONFIG)


def test_the_last_layer_computes_keys_and_values_for_every_token_and_the_rest_for_the_first():
    # n = 3, h = 4, I = 8: a full layer 2·3·(4·16 + 2·32) + 4·9·4 = 768 + 144 = 912; the last layer K, V for 3 tokens
    # 2·3·32 = 192, Q, O and the feed-forward for one 2·(32 + 64) = 192, attention of one query 4·3·4 = 48
    assert flops_per_row(3, CONFIG) == 2 * 912
    assert first_token_last_layer_flops(3, CONFIG) == 912 + 192 + 192 + 48


@pytest.mark.parametrize("lengths", ["4", "256,x", ""])
def test_bad_lengths_are_refused_by_name(lengths, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--lengths", lengths])
    assert stop.value.code == 2 and "--lengths" in capsys.readouterr().err

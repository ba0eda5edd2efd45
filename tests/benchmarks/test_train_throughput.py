"""benchmarks/train_throughput.py: the model-FLOPs count against the model's own weights, the
device peak table, and a tiny CPU run counting the tokens it trained on."""
from pathlib import Path
from types import SimpleNamespace

import pytest
from torch import nn

from tests.helpers import load_script as load_script_file

ROOT = Path(__file__).resolve().parents[2]


def load_script():
    return load_script_file(ROOT / "benchmarks" / "train_throughput.py")


def test_flops_by_hand():
    script = load_script()
    # hidden 2, 1 layer, intermediate 4, one sequence of 3 tokens: linear 2*3*(4*4 + 2*2*4) = 192, attention 2*2*9*2 = 72
    assert script.forward_flops([3], 2, 1, 4) == 264
    assert script.training_flops([3, 3], 2, 1, 4) == 3 * 2 * 264


def test_linear_flops_are_six_per_weight_and_token_of_the_real_model():
    """The matrix-product part of training_flops is the usual 6 × (weights of the layers' linear maps) per token,
    with the weights counted off a real BertModel of that shape."""
    from transformers import BertConfig, BertModel

    script = load_script()
    hidden, layers, heads, intermediate = script.SIZES["tiny"]
    model = BertModel(BertConfig(vocab_size=50, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                                 intermediate_size=intermediate), add_pooling_layer=False)
    weights = sum(m.weight.numel() for m in model.encoder.modules() if isinstance(m, nn.Linear))
    lengths = [7, 19, 64]
    attention = 3 * sum(2 * layers * 2 * n * n * hidden for n in lengths)
    assert script.training_flops(lengths, hidden, layers, intermediate) - attention == 6 * weights * sum(lengths)


def test_device_peaks():
    script = load_script()
    assert script.peak_tflops("NVIDIA H100 80GB HBM3", "bf16") == 989.4
    assert script.peak_tflops("NVIDIA H100 PCIe", "bf16") == 756.5
    assert script.peak_tflops("NVIDIA H200", "fp16") == 989.4
    assert script.peak_tflops("Some CPU", "bf16") is None


@pytest.mark.parametrize("task", ["cross", "bi"])
def test_a_tiny_cpu_run_counts_the_tokens_it_trained_on(task, tmp_path):
    script = load_script()
    a = SimpleNamespace(size="tiny", precision="fp32", seq_len=32, batch=8, steps=2, warmup=1, peak_tflops=None, cpu=True)
    result = script.run(task, a, tmp_path)
    assert result["steps"] == 2 and result["mfu"] is None and result["device"] == "CPU"
    if task == "cross":  # 8 pairs of 32 tokens a step (texts long enough to be truncated)
        assert result["sequences_per_step"] == 8
        assert result["tokens_per_s"] == pytest.approx(2 * 8 * 32 / result["seconds"])
    else:  # 8 queries + 16 documents a step
        assert result["sequences_per_step"] == 24
    assert result["model_tflops_per_s"] > 0

"""Multi-process training (DDP over 2 CPU processes, gloo): the loss and the gradients equal those of one process
training on the concatenated batch, for every model family — the dense dual encoder with its in-batch negatives
gathered across processes (with gradient), hard negatives aligned with their own queries, a document present in
both processes' batches counted once, a query's positive held by the other process excluded from its negatives,
and processes holding different item counts."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

# (query, positive, hard negatives): process 0 takes the first ITEMS_PER_RANK[0] items, process 1 the rest
ITEMS = [
    ("vitamin d bones", "vitamin d and bone health in adults", ["statin drugs lower cholesterol", "coffee and the liver"]),
    ("fish oil omega", "omega three fatty acids in fish oil", ["added sugar and diabetes risk", "sleep duration and memory"]),
    ("cholesterol statins", "statin drugs lower cholesterol", ["green tea and blood pressure", "salt intake and stroke"]),
    # process 1: the first query again with another positive (must not be its negative in process 0, nor the
    # reverse), a document process 0 also holds, and its own hard negatives
    ("vitamin d bones", "calcium and vitamin d supplements for fractures",
     ["iron deficiency in children", "coffee and the liver"]),
    ("green tea", "green tea and blood pressure", ["protein and muscle mass", "fiber and colon cancer"]),
]
# (family, loss, items per process): DDP averages per-process means, so plain per-item losses need equal shares;
# the dense model weights its loss so that unequal shares still give the global mean
CASES = [("dense", "contrastive", (3, 2)), ("cross", "bce", (2, 2)), ("twin", "listwise_ce", (2, 2)),
         ("colbert", "pairwise_softmax", (2, 2))]


def _build(family: str, model_dir: Path):
    from ssft.config.recipe import ModelConfig
    from ssft.config.registry import MODELS

    torch.manual_seed(0)  # heads / projections: the same initial weights in every process and in the reference
    cfg = ModelConfig(architecture=family, name=str(model_dir), max_length=48, query_max_length=12, head_learning_rate=None)
    ranker = MODELS.get(family).build(cfg, "full", {})
    ranker.eval()  # no dropout: every process and the reference compute the same function
    return ranker


def _items(lo: int, hi: int) -> list[dict]:
    return [{"query": q, "documents": [p, *negs]} for q, p, negs in ITEMS[lo:hi]]


def _loss_and_grads(family: str, loss_name: str, model_dir: Path, items: list[dict], wrap=None):
    from ssft.config.registry import LOSSES
    from ssft.data.examples import RankerCollator
    from ssft.training.objectives import ranking_loss

    ranker = _build(family, model_dir)
    model = wrap(ranker) if wrap else ranker
    loss, _ = ranking_loss(model, ranker, LOSSES.get(loss_name)(), RankerCollator(ranker)(items))
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in ranker.named_parameters() if p.grad is not None}
    return loss.detach(), grads


def _worker(rank: int, world: int, init_file: str, model_dir: str, out_file: str) -> None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        results = {}
        for family, loss_name, shares in CASES:
            lo = sum(shares[:rank])
            loss, grads = _loss_and_grads(family, loss_name, Path(model_dir), _items(lo, lo + shares[rank]),
                                          wrap=lambda r: DistributedDataParallel(r, find_unused_parameters=True))
            dist.all_reduce(loss)  # what the Trainer logs: the mean of the processes' losses
            results[family] = {"loss": loss / world, "grads": grads}
        if rank == 0:
            torch.save(results, out_file)
    finally:
        dist.destroy_process_group()


def test_two_process_ddp_matches_one_process(tiny_model_dir, tmp_path, monkeypatch):
    import torch.multiprocessing as mp

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    out_file = tmp_path / "ddp.pt"
    mp.spawn(_worker, args=(2, str(tmp_path / "init"), str(tiny_model_dir), str(out_file)), nprocs=2, join=True)
    ddp = torch.load(out_file)
    for family, loss_name, shares in CASES:
        loss, grads = _loss_and_grads(family, loss_name, tiny_model_dir, _items(0, sum(shares)))
        torch.testing.assert_close(ddp[family]["loss"], loss, rtol=1e-5, atol=1e-6, msg=f"{family}: loss")
        assert set(ddp[family]["grads"]) == set(grads), family
        assert any(g.abs().sum() > 0 for g in grads.values())
        for name, grad in grads.items():
            torch.testing.assert_close(ddp[family]["grads"][name], grad, rtol=1e-4, atol=1e-6, msg=f"{family}: {name}")


def test_gathered_rows_equal_one_process_rows(tiny_model_dir):
    """Without processes, ``gathered_in_batch_rows`` is ``in_batch_rows`` (same rows, weight 1)."""
    from ssft.data.examples import RankerCollator
    from ssft.models.dense import gathered_in_batch_rows, in_batch_rows, row_keys

    ranker = _build("dense", tiny_model_dir)
    batch = RankerCollator(ranker)(_items(0, len(ITEMS)))
    group = int(batch["group_size"])
    with torch.no_grad():
        q = ranker.encode_tokens(batch["q_input_ids"], batch["q_attention_mask"], "query").vectors
        d = ranker.encode_tokens(batch["d_input_ids"], batch["d_attention_mask"], "document").vectors
    expected = in_batch_rows(q, d, batch["q_index"], batch["d_index"], group, 20.0)
    rows, positives, weight = gathered_in_batch_rows(q, d, batch["q_index"], batch["d_index"], group, 20.0,
                                                     row_keys(batch["q_input_ids"], batch["q_attention_mask"]),
                                                     row_keys(batch["d_input_ids"], batch["d_attention_mask"]))
    torch.testing.assert_close(rows, expected)
    assert weight == 1.0
    assert len(positives[0]) == 2 and positives[0] == positives[3]  # the repeated query's two positives


def test_accelerate_launch_two_processes_end_to_end(tiny_model_dir, tmp_path):
    """``accelerate launch --multi_gpu --num_processes 2 ssft/train.py RECIPE`` on a machine without GPU (two gloo CPU
    processes through torchrun; accelerate's ``--cpu`` flag alone runs one process) trains the dense model with
    in-batch negatives gathered across the two processes, evaluates, and the main process writes the outputs once."""
    import json
    import re
    import subprocess
    import sys

    import yaml

    from tests.helpers import write_synthetic_beir

    data = write_synthetic_beir(tmp_path / "beir", queries=30, docs=40)
    out = tmp_path / "run"
    recipe = {
        "seed": 3,
        "model": {"architecture": "dense", "name": str(tiny_model_dir), "max_length": 32, "query_max_length": 8},
        "adapter": "full", "loss": "contrastive",
        "data": {"dataset": str(data), "negatives": "bm25", "num_negatives": 1},
        "eval": {"depth": 10, "metrics": ["nDCG@10", "R@10"], "batch_size": 16},
        "training": {"output_dir": str(out), "num_train_epochs": 1, "per_device_train_batch_size": 4, "learning_rate": 1e-3,
                     "use_cpu": True, "logging_steps": 1},
    }
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONPATH": str(root), "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    import socket

    with socket.socket() as sock:  # a free port: another run on the machine may hold torchrun's default 29500
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", "2", "--num_machines", "1", "--multi_gpu",
           "--main_process_port", str(port),
           "--mixed_precision", "no", "--dynamo_backend", "no", str(root / "ssft" / "train.py"), str(tmp_path / "recipe.yaml")]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    info = json.loads((out / "run_info.json").read_text())
    assert info["processes"] == 2
    assert proc.stderr.count("training done:") == 1  # the Trainer's summary, logged by the main process only
    steps = re.findall(r"step (\d+)/3 \(epoch ([\d.]+)\): loss", proc.stderr)  # 20 queries / (2 × 4) → 3 steps
    assert [int(step) for step, _ in steps] == [1, 2, 3] and float(steps[-1][1]) == 1, proc.stderr[-3000:]
    assert info["train_loss"] > 0 and info["train_loss"] == info["train_loss"]  # finite, trained
    metrics = json.loads((out / "metrics.json").read_text())
    assert 0.0 <= metrics["test"]["nDCG@10"] <= 1.0
    assert (out / "model" / "ssft_model.json").is_file() and (out / "run.test.trec").is_file()
    assert not list(out.glob("checkpoint-*"))  # removed by the main process once the run finished
    # the result table is printed once (by the main process), not once per process
    assert proc.stdout.count("trainable parameters") == 1, proc.stdout[-2000:]


def test_evaluation_without_write_leaves_no_files(tmp_path):
    """What the non-main processes of a multi-process run do: evaluate, write nothing."""
    from ssft.eval.rerank import write_and_evaluate

    run = {"q1": {"d1": 2.0, "d2": 1.0}}
    qrels = {"q1": {"d1": 1}}
    results = write_and_evaluate(run, run, qrels, "test", "bm25", ["nDCG@10"], tmp_path, 0.5, {}, write=False)
    assert results["test"]["nDCG@10"] == 1.0 and "test+bm25" in results
    assert not list(tmp_path.iterdir())


def test_daft_refuses_several_processes(tiny_model_dir, tmp_path):
    from types import SimpleNamespace

    from transformers import TrainerControl, TrainerState

    from ssft.config.recipe import ModelConfig
    from ssft.config.registry import MODELS
    from ssft.core.errors import SsftError
    from ssft.training.callbacks.daft import DaftCallback

    model = MODELS.get("dense").build(ModelConfig(architecture="dense", name=str(tiny_model_dir),
                                                  document_name=str(tiny_model_dir), max_length=32), "full", {})
    args = SimpleNamespace(output_dir=str(tmp_path), world_size=2, should_save=True, max_steps=-1, num_train_epochs=2)
    with pytest.raises(SsftError, match="DDP cannot follow"):
        DaftCallback().on_train_begin(args, TrainerState(), TrainerControl(), model=model)

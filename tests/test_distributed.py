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
    ("vitamin d bones", "calcium and vitamin d supplements for fractures", ["iron deficiency in children", "coffee and the liver"]),
    ("green tea", "green tea and blood pressure", ["protein and muscle mass", "fiber and colon cancer"]),
]
# (family, loss, items per process): DDP averages per-process means, so plain per-item losses need equal shares;
# the dense model weights its loss so that unequal shares still give the global mean
CASES = [("dense", "contrastive", (3, 2)), ("cross", "bce", (2, 2)), ("twin", "listwise_ce", (2, 2)),
         ("colbert", "pairwise_softmax", (2, 2))]


def _build(family: str, model_dir: Path):
    from ssft.recipe import ModelConfig
    from ssft.registry import MODELS

    torch.manual_seed(0)  # heads / projections: the same initial weights in every process and in the reference
    cfg = ModelConfig(architecture=family, name=str(model_dir), max_length=48, query_max_length=12, head_learning_rate=None)
    ranker = MODELS.get(family).build(cfg, "full", {})
    ranker.eval()  # no dropout: every process and the reference compute the same function
    return ranker


def _items(lo: int, hi: int) -> list[dict]:
    return [{"query": q, "documents": [p, *negs]} for q, p, negs in ITEMS[lo:hi]]


def _loss_and_grads(family: str, loss_name: str, model_dir: Path, items: list[dict], wrap=None):
    from ssft.data.examples import RankerCollator
    from ssft.registry import LOSSES
    from ssft.trainer import ranking_loss

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
        q = ranker.encode(batch["q_input_ids"], batch["q_attention_mask"], "query").vectors
        d = ranker.encode(batch["d_input_ids"], batch["d_attention_mask"], "document").vectors
    expected = in_batch_rows(q, d, batch["q_index"], batch["d_index"], group, 20.0)
    rows, positives, weight = gathered_in_batch_rows(q, d, batch["q_index"], batch["d_index"], group, 20.0,
                                                     row_keys(batch["q_input_ids"], batch["q_attention_mask"]),
                                                     row_keys(batch["d_input_ids"], batch["d_attention_mask"]))
    torch.testing.assert_close(rows, expected)
    assert weight == 1.0
    assert len(positives[0]) == 2 and positives[0] == positives[3]  # the repeated query's two positives

"""RankingTrainer's first home (``from ssft.trainer import RankingTrainer``); the code lives in ``ssft.training``."""
from ssft.training.checkpoints import (
    CHECKPOINT_MARKER,
    check_checkpoint,
    complete_checkpoints,
    discard_incomplete_checkpoints,
    latest_checkpoint,
)
from ssft.training.objectives import ranking_loss
from ssft.training.trainer import RankingTrainer

__all__ = ["CHECKPOINT_MARKER", "RankingTrainer", "check_checkpoint", "complete_checkpoints",
           "discard_incomplete_checkpoints", "latest_checkpoint", "ranking_loss"]

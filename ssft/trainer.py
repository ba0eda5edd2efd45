"""RankingTrainer's first home (``from ssft.trainer import RankingTrainer``); the code lives in ``ssft.training``."""
from ssft.training.trainer import (CHECKPOINT_MARKER, RankingTrainer, check_checkpoint, complete_checkpoints,
                                   discard_incomplete_checkpoints, latest_checkpoint, ranking_loss)

__all__ = ["CHECKPOINT_MARKER", "RankingTrainer", "check_checkpoint", "complete_checkpoints",
           "discard_incomplete_checkpoints", "latest_checkpoint", "ranking_loss"]

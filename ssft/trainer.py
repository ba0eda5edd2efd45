"""RankingTrainer's first home (``from ssft.trainer import RankingTrainer``); the code lives in ``ssft.training``."""
import warnings

from ssft.training.checkpoints import (
    CHECKPOINT_MARKER,
    check_checkpoint,
    complete_checkpoints,
    discard_incomplete_checkpoints,
    latest_checkpoint,
)
from ssft.training.objectives import ranking_loss
from ssft.training.trainer import RankingTrainer

# an old path kept for code written against earlier releases; the project itself imports the new homes
warnings.warn(f"{__name__} is deprecated: import from ssft.training (trainer, checkpoints, objectives)",
              DeprecationWarning, stacklevel=2)

__all__ = ["CHECKPOINT_MARKER", "RankingTrainer", "check_checkpoint", "complete_checkpoints",
           "discard_incomplete_checkpoints", "latest_checkpoint", "ranking_loss"]

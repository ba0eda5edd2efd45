"""The recipe's first home (``from ssft.recipe import load_recipe``); the code lives in ``ssft.config.recipe``."""
from ssft.config.recipe import (
                                AdapterSection,
                                DataConfig,
                                DistillationConfig,
                                EvalConfig,
                                LossSection,
                                ModelConfig,
                                Recipe,
                                apply_override,
                                load_recipe,
                                recipe_from_dict,
)

__all__ = ["AdapterSection", "DataConfig", "DistillationConfig", "EvalConfig", "LossSection", "ModelConfig", "Recipe",
           "apply_override", "load_recipe", "recipe_from_dict"]

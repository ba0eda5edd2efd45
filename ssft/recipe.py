"""The recipe's first home (``from ssft.recipe import load_recipe``); the code lives in ``ssft.config.recipe``."""
import warnings

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

# an old path kept for code written against earlier releases; the project itself imports the new homes
warnings.warn(f"{__name__} is deprecated: import from ssft.config.recipe", DeprecationWarning,
              stacklevel=2)

__all__ = ["AdapterSection", "DataConfig", "DistillationConfig", "EvalConfig", "LossSection", "ModelConfig", "Recipe",
           "apply_override", "load_recipe", "recipe_from_dict"]

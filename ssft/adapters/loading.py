"""Loading saved adapter weights safely: PEFT adapters on their base model, pickle weight files refused."""
from __future__ import annotations

import re
from pathlib import Path

from peft import PeftModel
from torch import nn

from ssft.core.errors import SsftError
from ssft.core.paths import SPEC_FILE

# pickle weight files (torch.save): never loaded, whatever a folder holds beside them
PICKLE_WEIGHTS = re.compile(r"(pytorch_model|adapter_model)(-\d+-of-\d+)?\.bin(\.index\.json)?")

# how torch reports one parameter of another shape (PEFT loading an adapter saved on another base model)
_SIZE_MISMATCH = re.compile(r"size mismatch for (\S+): copying a param with shape torch\.Size\((\[[^\]]*\])\) from "
                            r"checkpoint, the shape in current model is torch\.Size\((\[[^\]]*\])\)")


def refuse_pickle_weights(folder: Path) -> None:
    """SsftError when the weights of ``folder`` (a transformers model or PEFT adapter folder) are pickle files
    only (``pytorch_model.bin``, ``adapter_model.bin``): unpickling runs whatever the file asks for."""
    folder = Path(folder)
    if not folder.is_dir() or any(folder.glob("*.safetensors")):
        return
    pickled = sorted(p.name for p in folder.iterdir() if PICKLE_WEIGHTS.fullmatch(p.name))
    if pickled:
        raise SsftError(f"{folder / pickled[0]}: pickle weights are not loaded; convert to safetensors")


def load_peft_adapter(transformer: nn.Module, folder: Path, base_model: str | None, adapter_name: str = "default",
                      into: nn.Module | None = None) -> nn.Module:
    """The PEFT adapter saved in ``folder`` on top of ``transformer`` (``peft.PeftModel.from_pretrained``), or added
    to the PeftModel ``into`` under ``adapter_name``. Pickle weights are refused; an adapter saved on another base
    model (other hidden size) is one SsftError naming the folder, the base model and the first mismatch."""
    folder = Path(folder)
    refuse_pickle_weights(folder)
    try:
        if into is None:
            return PeftModel.from_pretrained(transformer, folder, adapter_name=adapter_name, is_trainable=False)
        into.load_adapter(folder, adapter_name=adapter_name, is_trainable=False)
        return into
    except RuntimeError as err:
        mismatch = _SIZE_MISMATCH.search(str(err))
        if mismatch is None:
            raise
        name, saved, wanted = mismatch.groups()
        name = name.removeprefix("base_model.model.")
        raise SsftError(f"{folder}: the adapter does not fit base model '{base_model}' (first size mismatch: {name} is "
                        f"{saved} in the adapter, {wanted} in the base model); it was saved on another base model, "
                        f"load it on that one (base_model in {SPEC_FILE})") from None


__all__ = ["PICKLE_WEIGHTS", "load_peft_adapter", "refuse_pickle_weights"]

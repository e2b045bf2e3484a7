"""The smallest objects `save_checkpoint` accepts: a module and a processor that save themselves
the way transformers' do (safetensors weights, a JSON processor config), for checkpoint tests
that need no model."""

from __future__ import annotations

import torch


class SaveableLinear(torch.nn.Module):
    """One linear layer that saves like a transformers model (`model.safetensors`)."""

    def __init__(self, n_in: int = 3, n_out: int = 2):
        super().__init__()
        self.w = torch.nn.Linear(n_in, n_out)

    def save_pretrained(self, d):
        from safetensors.torch import save_file

        save_file(self.state_dict(), str(d / "model.safetensors"))


class JsonProcessor:
    """Saves an empty processor config, as a processor's `save_pretrained` writes one."""

    def save_pretrained(self, d):
        (d / "processor_config.json").write_text("{}")

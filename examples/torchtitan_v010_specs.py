"""Train specs for torchtitan 0.1.0 (``--experimental.custom_import torchtitan_v010_specs --model.name NAME``),
registered through torchtitan's own extension point:

    llama3_eager_loss    torchtitan's ``llama3`` with the loss kept out of ``torch.compile``, as torchtitan's
                         trainer of December 2024 ran it (its ``train.py``: "TODO: compiling loss function causes
                         CUDA errors, turning off for now"); 0.1.0 compiles the loss with the model.
"""
from __future__ import annotations

import dataclasses

from torchtitan.components.loss import cross_entropy_loss
from torchtitan.protocols.train_spec import get_train_spec, register_train_spec


def build_eager_loss(job_config):
    """The cross-entropy loss, never compiled."""
    return cross_entropy_loss


register_train_spec(dataclasses.replace(get_train_spec("llama3"), name="llama3_eager_loss",
                                        build_loss_fn=build_eager_loss))

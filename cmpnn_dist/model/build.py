"""``build_model``: the model a config names (``model.family``), the one constructor the
trainer, ``evaluate`` and ``predict`` call."""

from __future__ import annotations

from torch import nn

from cmpnn_dist.config import ModelConfig, OpsConfig


def build_model(
    cfg: ModelConfig, ops: OpsConfig, num_relations: int, num_nodes: int, inductive: bool = False
) -> nn.Module:
    """``cmpnn``: :class:`~cmpnn_dist.model.CMPNN` (any graph); ``rgcn`` / ``compgcn``: the
    R-MPNN baselines of :mod:`cmpnn_dist.model.rmpnn`, which learn one embedding per node of
    the training graph (``num_nodes``) and so cannot run on an inductive split."""
    if cfg.family == "cmpnn":
        from cmpnn_dist.model.cmpnn import CMPNN

        return CMPNN(cfg, num_relations, ops)
    if inductive:
        raise ValueError(
            f"model.family={cfg.family} learns node embeddings and is transductive only; "
            "this dataset is an inductive split (use model.family=cmpnn)"
        )
    from cmpnn_dist.model.rmpnn import RGCN, CompGCN

    model_class = {"rgcn": RGCN, "compgcn": CompGCN}[cfg.family]
    return model_class(num_nodes, num_relations, cfg, ops)

"""The readout against the paper's code: HxyScotthuang/CMPNN ``cmpnn/layer.py``,
``GeneralizedRelationalConv.combine`` and ``calculate_read_out`` (the readout commit), transcribed
below with their loop over the batch and their names; ours computes all queries at once."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from cmpnn_dist.graph import graph_from_triples
from cmpnn_dist.model.readout import Readout, relation_node_sets

N, B, D, R = 9, 3, 4, 3


def paper_calculate_read_out(edge_list, input, r_index, readout_type):
    """``calculate_read_out``: edge_list [E, 3] (source, target, relation), input [N, B, d],
    r_index [B] -> (tail_read_out, head_read_out), each [N, B, d] (one row repeated)."""
    num_node, batch_size, dimension = input.shape
    r_index_expanded = r_index.unsqueeze(0).expand(edge_list.size(0), -1)
    edge_type_mask = edge_list[:, 2].unsqueeze(1) == r_index_expanded
    tail_read_out_val = torch.zeros(1, batch_size, dimension, dtype=input.dtype)
    head_read_out_val = torch.zeros(1, batch_size, dimension, dtype=input.dtype)
    for i in range(batch_size):
        tail_node_mask = torch.zeros(num_node, dtype=torch.bool)
        head_node_mask = torch.zeros(num_node, dtype=torch.bool)
        tail_indices = edge_list[edge_type_mask[:, i], 0]  # the sources of q-edges
        head_indices = edge_list[edge_type_mask[:, i], 1]  # their targets
        tail_node_mask[tail_indices] = True
        head_node_mask[head_indices] = True
        tail_masked_input = input[:, i, :] * tail_node_mask.unsqueeze(1).to(input.dtype)
        head_masked_input = input[:, i, :] * head_node_mask.unsqueeze(1).to(input.dtype)
        if readout_type == "sum":
            head_read_out_batch = head_masked_input.sum(dim=0)
            tail_read_out_batch = tail_masked_input.sum(dim=0)
        else:  # "mean"
            head_read_out_batch = head_masked_input.mean(dim=0)
            tail_read_out_batch = tail_masked_input.mean(dim=0)
        tail_read_out_val[:, i, :] = tail_read_out_batch
        head_read_out_val[:, i, :] = head_read_out_batch
    return tail_read_out_val.repeat(num_node, 1, 1), head_read_out_val.repeat(num_node, 1, 1)


def paper_readout_terms(kind, readout_type, edge_list, input, r_index, linears):
    """What ``combine`` adds to ``self.linear(cat[input, update])`` before the layer norm: the
    query-specific readout ``outward_readout(tail) + inward_readout(head)``, or the global one
    ``transform_readout(SumReadout / MeanReadout of the graph's nodes)``."""
    if kind == "relation":
        tail, head = paper_calculate_read_out(edge_list, input, r_index, readout_type)
        return linears["outward_readout"](tail) + linears["inward_readout"](head)
    pooled = input.sum(0) if readout_type == "sum" else input.mean(0)  # torchdrug's readouts
    return linears["transform_readout"](pooled.unsqueeze(0).repeat(input.size(0), 1, 1))


def facts() -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    return torch.stack(
        [torch.randint(0, N, (20,), generator=g), torch.randint(0, R, (20,), generator=g),
         torch.randint(0, N, (20,), generator=g)], 1,
    )  # fmt: skip


@pytest.mark.parametrize("kind", ["sum", "relation"])
@pytest.mark.parametrize("pool", ["sum", "mean"])
def test_readout_is_the_paper_codes_with_bias(kind, pool):
    torch.manual_seed(0)
    triples = facts()
    graph = graph_from_triples(N, R, triples.numpy())  # inverse edges added: 2R relations
    ours = Readout(kind, D, pool=pool, bias=True).double()
    linears = {
        "inward_readout": ours.w1,  # V_q^+: the targets of q-edges
        "outward_readout": getattr(ours, "w2", None),  # V_q^-: their sources
        "transform_readout": ours.w1,
    }
    h = torch.randn(N, B, D, dtype=torch.float64)
    rels = torch.tensor([0, 4, 0])  # 4: the inverse of relation 1 (head prediction)
    keep = torch.rand(graph.num_edges) > 0.3  # the edges left after removal
    edge_list = torch.stack([graph.src, graph.dst(), graph.rel], 1)[keep]
    want = paper_readout_terms(kind, pool, edge_list, h, rels, linears)
    sets = relation_node_sets(graph, rels, keep) if kind == "relation" else None
    got = ours(h, sets)
    torch.testing.assert_close(got.unsqueeze(0).expand(N, B, D), want)


def test_defaults_are_the_papers_equations():
    """Without bias and with sums (the paper's equation for READOUT), W_1 sum h exactly."""
    torch.manual_seed(0)
    ours = Readout("sum", D).double()
    assert ours.w1.bias is None
    h = torch.randn(N, B, D, dtype=torch.float64)
    torch.testing.assert_close(ours(h, None), h.sum(0) @ ours.w1.weight.T)
    mean = Readout("sum", D, pool="mean").double()
    mean.load_state_dict(ours.state_dict())
    torch.testing.assert_close(mean(h, None) * N, ours(h, None))


@pytest.mark.parametrize("kind", ["sum", "relation"])
def test_rows_equal_the_dense_readout_with_every_node_visited(kind):
    """Pruned propagation's rows: the same readout as the dense one when every pair is a row."""
    torch.manual_seed(1)
    graph = graph_from_triples(N, R, facts().numpy())
    ours = Readout(kind, D, pool="mean", bias=True).double()
    h = torch.randn(N, B, D, dtype=torch.float64)
    rels = torch.tensor([1, 2, 5])
    sets = relation_node_sets(graph, rels)
    keys = torch.arange(B * N)  # b * N + v
    rows = h.permute(1, 0, 2).reshape(B * N, D)
    torch.testing.assert_close(ours.rows(rows, keys, N, B, sets), ours(h, sets))


def test_an_unknown_pool_is_refused():
    with pytest.raises(ValueError, match="readout_pool"):
        Readout("sum", D, pool="max")
    assert isinstance(Readout("none", D, pool="mean"), nn.Module)

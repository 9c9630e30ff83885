"""A learned prior on the relations around each candidate: added to every candidate's logit
(``model.prior=relations``, dense and pruned alike: :class:`~cmpnn_dist.model.cmpnn.CMPNN`) or
only to the candidates a pruned model never visits (``model.prune.unvisited=relations``).

Pruned propagation (:mod:`cmpnn_dist.model.pruned`) leaves every node it does not visit at its
initial state 0, so with ``unvisited=constant`` (A*Net) all of them score

    c_q = decoder(0, z_q)

and tie.  An answer that is never visited then ranks below every unvisited candidate (with
pessimistic ties): on the GraIL v1 splits at node_ratio 0.1 that is every lost Hits@10_50
(``benchmarks/results/studies/pruned_unvisited.md``), and answers beyond the heads' T-hop horizon
are never visited at any ratio.  The dense model does rank them: the layers' biases give every node
a state, and the relation-specific messages it then receives make that state a function of the
relations around the node, the same for every head.  ``unvisited=relations`` learns a K-hop summary
of those relations instead (K = ``model.prune.unvisited_hops``, default 2), once per graph and not
per query:

    n_v           = (number of kept edges of relation r entering v)_r          [N, 2|R|]
    e^(1)_v       = ReLU(U_1 log(1 + n_v) + a_1)                               [N, d]
    e^(k+1)_v     = e^(k)_v + ReLU(U_{k+1} mean_{(w, r, v) kept} e^(k)_w + a_{k+1})
    s(v | u, q)   = c_q + W[q] . e^(K)_v              (v not visited from u)   [B, N]

with W [2|R|, d] zero at the start, so a run starts from A*Net's constant.  It reads only the
graph (inductive: no entity parameters); the edges that ``edge_mask`` removes (the query
pair's, in training) are neither counted nor averaged over, so a training answer is not told
by its own edge.  Cost per training forward O(E + P d) for K = 1 (P: distinct (node, relation)
pairs) and O(E d) more per further hop, no [N, B, d] tensor (at biokg scale a hop costs about
as much as the rest of a pruned step at node_ratio 0.005: docs/pruned.md); without autograd and
without a mask, e^(K) is computed once per graph and parameter version.  Visited candidates keep
``decoder(h^(T), z_q)``, so the dense limit (every node visited) is unchanged; candidates with
the same e^(K) still tie, under the evaluation's rule.

``model.prior=relations`` (K = ``model.prior_hops``) adds the same term to every candidate,

    logit(v | u, q) = decoder(h^(T)_{v|u,q}, z_q) + W[q] . e^(K)_v              [B, N]

in the dense model as in the pruned one, so the dense model stays the pruned one's limit.  The
prior then learns from every candidate's loss (on fb237_ind_v1 it keeps the pruned model
within 0.015 of dense: docs/pruned.md, "Accuracy").
"""

from __future__ import annotations

import warnings
import weakref
from typing import NamedTuple

import torch
from torch import Tensor, nn

from cmpnn_dist.graph import Graph


def relation_profile(graph: Graph, edge_mask: Tensor | None, dtype: torch.dtype) -> Tensor:
    """``log(1 + n)`` as a sparse COO float [N, 2|R|] (n: kept edges of each relation that
    enter each node)."""
    pair_node, pair_rel, edge_pair, counts = graph.relation_pairs()
    if edge_mask is not None:
        counts = torch.bincount(edge_pair[edge_mask], minlength=pair_node.numel())
    return torch.sparse_coo_tensor(
        torch.stack([pair_node, pair_rel]),
        torch.log1p(counts.to(dtype)),
        (graph.num_nodes, graph.num_relations),
        is_coalesced=True,  # sorted and distinct (torch.unique)
        check_invariants=False,
    )


class EvalCache(NamedTuple):
    """A :class:`RelationPrior`'s e^(K) [N, d] of one graph; ``key``: the graph's version and
    the parameters' (address, version, dtype, device).  The graph is held weakly: one that is
    gone matches no other."""

    graph: weakref.ReferenceType[Graph]
    key: tuple
    embedding: Tensor


class RelationPrior(nn.Module):
    """``W[q] . e^(K)_v`` for every node v and query relation q of a batch (the module
    docstring's equations; ``hops`` = K >= 1).  Args of :meth:`forward`: graph (2|R| relations),
    rels int64 [B], edge_mask bool [E] or None.  Returns float [B, N]."""

    def __init__(self, num_relations: int, dim: int, hops: int = 2):
        super().__init__()
        if hops < 1:
            raise ValueError(f"model.prune.unvisited_hops={hops!r} must be >= 1")
        self.num_relations = num_relations
        self.profile = nn.Linear(num_relations, dim)  # U_1, a_1
        self.neighbours = nn.ModuleList(nn.Linear(dim, dim) for _ in range(hops - 1))  # U_k, a_k
        self.weight = nn.Parameter(torch.zeros(num_relations, dim))  # W
        # evaluation: e^(K) of the last graph, until the graph or a parameter changes
        self.eval_cache: EvalCache | None = None

    def _load_from_state_dict(self, state_dict: dict, prefix: str, *args, **kwargs) -> None:
        # a state dict whose one extra hop is a single Linear "neighbours" (not a list)
        for name in ("weight", "bias"):
            old = f"{prefix}neighbours.{name}"
            if old in state_dict:
                state_dict[f"{prefix}neighbours.0.{name}"] = state_dict.pop(old)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def embed(self, graph: Graph, edge_mask: Tensor | None = None) -> Tensor:
        """e^(K) float [N, d], in the parameters' dtype (outside autocast: a sparse product)."""
        with torch.autocast(graph.src.device.type, enabled=False):
            return self._embed(graph, edge_mask)

    def _embed(self, graph: Graph, edge_mask: Tensor | None) -> Tensor:
        if graph.num_relations != self.num_relations:
            raise ValueError(
                f"graph has {graph.num_relations} edge relations, the unvisited-node prior "
                f"{self.num_relations}"
            )
        dtype = self.weight.dtype
        profile = relation_profile(graph, edge_mask, dtype)
        e = torch.relu(torch.sparse.mm(profile, self.profile.weight.t()) + self.profile.bias)
        if not len(self.neighbours):
            return e
        # the mean over kept in-edges as one sparse product over the graph's destination CSR
        n, dst = graph.num_nodes, graph.dst()
        if edge_mask is None:
            kept = torch.ones(graph.num_edges, dtype=dtype, device=e.device)
        else:
            kept = edge_mask.to(dtype)
        degree = torch.zeros(n, dtype=dtype, device=e.device).index_add_(0, dst, kept)
        with warnings.catch_warnings():  # torch: "Sparse CSR tensor support is in beta"
            warnings.filterwarnings("ignore", message="Sparse CSR tensor support")
            mean_of_in = torch.sparse_csr_tensor(
                graph.indptr,
                graph.src,
                kept / degree.clamp(min=1).index_select(0, dst),
                (n, n),
                check_invariants=False,
            )
        for layer in self.neighbours:
            e = e + torch.relu(layer(torch.sparse.mm(mean_of_in, e)))
        return e

    def forward(self, graph: Graph, rels: Tensor, edge_mask: Tensor | None = None) -> Tensor:
        if torch.is_grad_enabled() or edge_mask is not None:
            e = self.embed(graph, edge_mask)
        else:  # evaluation: once per graph and parameter version (in-place updates bump
            # _version; a replaced or moved tensor has another address, dtype or device)
            key = (
                graph.version,
                *((p.data_ptr(), p._version, p.dtype, p.device) for p in self.parameters()),
            )
            cache = self.eval_cache
            if cache is None or cache.graph() is not graph or cache.key != key:
                cache = self.eval_cache = EvalCache(weakref.ref(graph), key, self.embed(graph))
            e = cache.embedding
        return self.weight.index_select(0, rels) @ e.t()

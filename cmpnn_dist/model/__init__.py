"""C-MPNN layers (no training code): ``CMPNN(cfg, num_relations, ops)``."""

from cmpnn_dist.model.aggregations import Aggregation
from cmpnn_dist.model.cmpnn import CMPNN
from cmpnn_dist.model.decoder import Decoder
from cmpnn_dist.model.init import initial_states
from cmpnn_dist.model.layer import CMPNNLayer
from cmpnn_dist.model.messages import MessageFunction
from cmpnn_dist.model.readout import Readout, relation_node_sets

__all__ = [
    "CMPNN",
    "Aggregation",
    "CMPNNLayer",
    "Decoder",
    "MessageFunction",
    "Readout",
    "initial_states",
    "relation_node_sets",
]

"""The graph store: Arrow IPC datasets with memory-mapped, destination-sharded CSR graphs.

Layout and manifest: ``storage/README.md`` (and :mod:`cmpnn_dist.storage.format`).
"""

from cmpnn_dist.storage.errors import StorageError
from cmpnn_dist.storage.format import FORMAT_VERSION
from cmpnn_dist.storage.reader import CSRShard, Dataset, GraphData, open_dataset
from cmpnn_dist.storage.verify import verify_dataset
from cmpnn_dist.storage.writer import GraphSpec, write_dataset

__all__ = [
    "FORMAT_VERSION",
    "CSRShard",
    "Dataset",
    "GraphData",
    "GraphSpec",
    "StorageError",
    "open_dataset",
    "verify_dataset",
    "write_dataset",
]

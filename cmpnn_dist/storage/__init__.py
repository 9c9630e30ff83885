"""The graph store: Arrow IPC datasets with memory-mapped, destination-sharded CSR graphs.

Layout and manifest: ``storage/README.md`` (and :mod:`cmpnn_dist.storage.format`).
"""

from cmpnn_dist.lazy import exports

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
]  # imported on first use (the reader and writer load torch)
__getattr__, __dir__ = exports(
    __name__,
    {"FORMAT_VERSION": "cmpnn_dist.storage.format", "StorageError": "cmpnn_dist.storage.errors",
     "CSRShard": "cmpnn_dist.storage.reader", "Dataset": "cmpnn_dist.storage.reader",
     "GraphData": "cmpnn_dist.storage.reader", "open_dataset": "cmpnn_dist.storage.reader",
     "verify_dataset": "cmpnn_dist.storage.verify", "GraphSpec": "cmpnn_dist.storage.writer",
     "write_dataset": "cmpnn_dist.storage.writer"},
)  # fmt: skip

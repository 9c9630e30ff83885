"""cmpnn_dist: conditional message passing neural networks (C-MPNNs) for link prediction.

Layers, bottom up: ``graph`` / ``storage`` / ``convert`` (Arrow CSR shards), ``ops``
(message-passing kernels), ``model`` (layers only), ``evaluation``, ``training`` (the worker
loop), ``distributed`` (Ray Train + DDP), and the Hydra CLIs ``train`` / ``evaluate``.
See docs/design.md.
"""

__version__ = "0.1.0"

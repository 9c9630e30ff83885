"""Find ops that would stall a CUDA host queue, on any device (tests' helper).

A :class:`OpLog` records every aten op dispatched while it is active; :func:`host_syncs` runs
a function under it and returns the ops that wait for the device (a device -> host read) or
copy host data to the device (a Python scalar or list turned into a tensor).  On CUDA either
one stalls the host behind the GPU and makes the code impossible to capture in a CUDA graph.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

HOST_SYNC_OPS = {
    "aten._local_scalar_dense.default",  # .item(), int(t), bool(t)
    "aten.is_nonzero.default",
    "aten.equal.default",
    "aten.nonzero.default",
    "aten.masked_select.default",
    "aten._unique2.default",
    "aten.unique_dim.default",
    "aten.unique_consecutive.default",
    "aten.repeat_interleave.Tensor",  # output size read from the device
    "aten.lift_fresh.default",  # torch.tensor(python data)
    "aten.lift_fresh_copy.default",
}


class OpLog(TorchDispatchMode):
    """Every aten op dispatched while active, except while ``paused`` > 0 (bool-mask indexing,
    which reads the mask's count back, is tagged "(bool index)")."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []
        self.paused = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        if not self.paused:
            name = str(func)
            bool_index = name.startswith(("aten.index.", "aten.index_put")) and any(
                t is not None and t.dtype == torch.bool for t in args[1]
            )
            self.ops.append(name + (" (bool index)" if bool_index else ""))
        return func(*args, **(kwargs or {}))

    def syncs(self) -> list[str]:
        return [op for op in self.ops if op in HOST_SYNC_OPS or op.endswith("(bool index)")]


def host_syncs(fn: Callable[[], object], log: OpLog | None = None) -> list[str]:
    """The host-syncing ops ``fn()`` dispatches (``log``: a log to use, e.g. one that the
    caller pauses around calls it does not want to inspect)."""
    log = log or OpLog()
    with log:
        fn()
    return log.syncs()

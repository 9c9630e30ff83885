"""``python -m cmpnn_dist.cli.reaper DRIVER_PID SESSION_DIR``: the watcher that stops a dead
driver's Ray processes (:mod:`cmpnn_dist.distributed.reaper`; started by
:func:`~cmpnn_dist.distributed.reaper.start_reaper`, not by users)."""

from __future__ import annotations

import sys

from cmpnn_dist.distributed.reaper import watch


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    watch(int(args[0]), args[1])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

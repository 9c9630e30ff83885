"""``python -m cmpnn_dist.wl``: the command is :mod:`cmpnn_dist.cli.wl`.

Every command lives in ``cmpnn_dist/cli/``; this module only gives it its ``-m`` name.
"""

from cmpnn_dist.cli.wl import main

if __name__ == "__main__":
    raise SystemExit(main())

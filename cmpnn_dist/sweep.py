"""``python -m cmpnn_dist.sweep``: the command is :mod:`cmpnn_dist.cli.sweep`.

Every command lives in ``cmpnn_dist/cli/``; this module only gives it its ``-m`` name.
"""

from cmpnn_dist.cli.sweep import main

if __name__ == "__main__":
    raise SystemExit(main())

"""``python -m cmpnn_dist.predict.batch``: the command is :mod:`cmpnn_dist.cli.batch`.

Every command lives in ``cmpnn_dist/cli/``; this module only gives it its ``-m`` name.
"""

from cmpnn_dist.cli.batch import main

if __name__ == "__main__":
    raise SystemExit(main())

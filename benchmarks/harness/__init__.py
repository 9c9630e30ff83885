"""The benchmarks' harness: what every suite shares.

- :mod:`~benchmarks.harness.provenance`: the commit, the command that reruns a figure, the
  children it ran, the message-passing path that ran;
- :mod:`~benchmarks.harness.results`: where a suite's figures live
  (``benchmarks/results/<suite>/``) and how they are written (Markdown + JSON, whole or not at
  all);
- :mod:`~benchmarks.harness.timing`: warm-up and timed repetitions, interleaved rounds of
  several cases, CPU seconds and peak RSS;
- :mod:`~benchmarks.harness.args`: the argument parser every script starts from;
- :mod:`~benchmarks.harness.peer`: NBFNet-PyG run side by side, by its own interpreter;
- :mod:`~benchmarks.harness.suites`: the suites and their targets (``python -m benchmarks``);
- :mod:`~benchmarks.harness.device`: a device call as budgeted steps on a lent card.
"""

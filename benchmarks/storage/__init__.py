"""storage: the Arrow CSR shards: conversion, opening, memory, the integrity check.

The figures: ``results/storage/``.
"""

from benchmarks.harness.suites import Target

TARGETS = [
    Target("storage", "TSV to Arrow, open time and memory against pandas and torch.load",
           ("--repeats", "3")),
    Target("shard_verify", "the sha256 check on open: none, every byte, the stamp",
           ("--rounds", "5")),
]  # fmt: skip

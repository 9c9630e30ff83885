"""pruned: pruned propagation beside dense, in cost and in accuracy.

The figures: ``results/pruned/`` (a step and an evaluation forward at biokg, Hetionet and wikikg2
scale, where a pruned step's time goes, test accuracy on the GraIL v1 splits).
"""

from benchmarks.harness.suites import Target

TARGETS = [
    Target("pruned_speed", "pruned against dense: step and evaluation forward per query, memory",
           ("--graph", "biokg", "--ratios", "dense", "0.005"),
           ("--graph", "small", "--rounds", "1", "--eval-rounds", "1", "--out", "{tmp}")),
    Target("pruned_profile", "where a pruned step's time goes: phases, host syncs, profiles",
           ("--device", "cuda"), needs=("cuda",)),
    Target("pruned_accuracy", "pruned against dense on fb237_ind_v1 / wn18rr_ind_v1: test accuracy",
           ("--ratios", "dense", "0.1", "--prior", "relations", "--epochs", "20"),
           needs=("shared-data",)),
]  # fmt: skip

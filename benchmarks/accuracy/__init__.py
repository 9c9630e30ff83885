"""accuracy: the paper's tables reproduced, the seeds' spread, and accuracy between commits.

The figures: ``results/accuracy/`` (the eight GraIL splits, the readout, architecture and
initialisation tables, the basic model's seeds, the Hits@10 rules, the CI guard's power,
TRI-SQR).  The tables' sweeps run for days in resumable pieces: ``paper_inductive run`` goes on
where the last piece stopped, ``save`` archives the cells, ``table`` writes the table.
"""

from benchmarks.harness.suites import Target

TARGETS = [
    Target("paper_inductive", "the paper's tables from the archived cells (run / save first)",
           ("table",), ("table", "--out", "{tmp}")),
    Target("reproduce_inductive", "the basic C-MPNN on the GraIL v1 splits, three seeds",
           ("--presets", "fb237_ind_v1", "wn18rr_ind_v1"), needs=("shared-data",)),
    Target("hits_rules", "Hits@10_50 of the kept ranks under each negatives rule",
           ("--from-saved-ranks",)),
    Target("guard_power", "the CI accuracy guard's power from a sweep of seeds",
           ("--storage", "STORE", "--sweep", "guard_wn18rr_v1_e5")),
    Target("accuracy_commits", "one preset's accuracy at two commits, Welch's t",
           ("--commits", "main", "HEAD", "--preset", "fb237_ind_v1", "--storage", "STORE")),
    Target("trisqr", "TRI-SQR: the global readout against none"),
    Target("paper_inductive_card", "the sweeps' cells unpacked here after a card trained them",
           ("unpack", "--storage", "STORE", "PARTS")),
]  # fmt: skip

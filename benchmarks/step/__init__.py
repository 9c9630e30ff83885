"""step: a training step and an evaluation forward, their CPU time, memory and faults.

The figures: ``results/step/`` (the CPU step beside NBFNet-PyG, the kernel's share, glibc's
malloc against the project's, every preset's epoch, biokg and Hetionet scale, evaluation
throughput, the GPU step, end-to-end runs and bf16 on a card).
"""

from benchmarks.harness.suites import Target

TARGETS = [
    Target("train_speed_cpu", "the CPU training step beside NBFNet-PyG, idle and busy",
           ("--peer-venv", "/work/peer/venv"), needs=("peer", "shared-data")),
    Target("train_step_cpu_kernel", "the CPU training step with and without the compiled kernel",
           needs=("shared-data",)),
    Target("malloc_faults", "a step's user / system time and faults, glibc's malloc against ours",
           ("--rounds", "3")),
    Target("preset_times", "every preset's CPU time per step and epoch", ("--steps", "10")),
    Target("bio_train_speed", "training queries/s and memory at biokg and Hetionet scale",
           ("--graph", "both"), ("--small", "--steps", "2", "--warmup", "1", "--out", "{tmp}")),
    Target("eval_throughput", "evaluation rankings/s per protocol at biokg scale",
           ("--facts", "64"), ("--small", "--out", "{tmp}")),
    Target("train_step", "a 6-layer training step at biokg scale per ops impl",
           ("--device", "cuda"), ("--small", "--device", "cpu", "--reps", "1", "--out", "{tmp}")),
    Target("gpu_precision", "bf16 against fp32 training steps at biokg scale",
           ("--device", "cuda", "--configs", "dense", "0.005"), needs=("cuda",)),
    Target("gpu_e2e", "real training runs on a card: fp32, bf16, SIGKILL and resume",
           ("--runs", "cuda_default", "cuda_fb237"), needs=("cuda",)),
]  # fmt: skip

#!/usr/bin/env bash
# One device call for issue 24 (items 1-4), prepared to fit a few minutes of a lent H100 / H200:
#   0. versions and the card (env.txt);
#   1. every `gpu`-marked test and the whole fused-kernel test file on the card;
#   2. the one-layer benchmark (message_passing.py: reference, fused, the torch.sparse floor, the
#      output check) on the biokg-scale graph -> the three kernel targets;
#   3. benchmarks/gpu_e2e.py: the default run and conf=fb237_ind_v1 on the card (fp32, bf16)
#      against the CPU reference of the same seed (run on the card machine's CPU cores, in the
#      background), and a SIGKILL mid-run with resume on the card;
#   4. benchmarks/eval_throughput.py --device cuda: forward batches per second per protocol at
#      biokg scale and the projected full biokg test ranking;
#   5. benchmarks/train_step.py --device cuda: the 6-layer training step (reference vs fused).
# The biokg-scale graph and dataset are generated on the card machine's CPU while 1 runs.
#   6. (STEPS=pruned) the pruned-propagation benchmark on the card, beside dense.
# STEPS picks the steps (default "tests e2e layer eval step"; the device time is short).
# The fused kernels' tuning space is cut to eight tilings so that compiling stays short:
# the six that won the last full autotuning (run 3, benchmarks/results/fused_kernels_h200.md)
# in today's form (stages 1: a plain edge loop) and two with the software-pipelined edge loop
# (stages 3; opt-in, CMPNN_TRITON_PIPELINE=1), which the first run of this script on an H200
# found 2.2x slower (benchmarks/results/gpu_session_h200.md): every tiling's time lands in
# the tuning log, so the two kinds are compared in one run.
# Python packages the card's image lacks (hydra-core, omegaconf, antlr4, ogb) and the
# fb237_v1 raw files travel in the ignored folder .gpu/ (see the device tool's notes):
#   .gpu/site/<package>/ (copied from a venv of this project), .gpu/data/inductive/fb237_v1{,_ind}
# Usage (on the card): OUT=/some/dir bash benchmarks/gpu_session.sh   (at most 8 files in $OUT)
set -u
OUT=${OUT:-/tmp/gpu_session}
W=/tmp/gpu_work
mkdir -p "$OUT" "$W"
export PYTHONPATH="$PWD:$PWD/.gpu/site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export TRITON_DEFAULT_FP_FUSION=1
TILINGS="4,128,2,1,0,1;2,256,1,1,0,1;16,64,4,1,0,0;8,64,2,1,0,0;2,256,2,1,0,1;16,64,4,1,0,1"
TILINGS="$TILINGS;4,128,2,3,0,1;2,256,1,3,0,1"
STEPS=" ${STEPS:-tests e2e layer eval step} "
want() { [[ "$STEPS" == *" $1 "* ]]; }
# every step gets at most its cap and never runs into the packing at the end: the whole script
# ends within BUDGET seconds (the device call's timeout_s should leave ~30 s more)
END=$(( $(date +%s) + ${BUDGET:-420} ))
cap() { local left=$(( END - $(date +%s) - 15 )); (( left < $1 )) && echo $(( left > 1 ? left : 1 )) || echo "$1"; }
step() { echo "== $1 $(date +%T)" | tee -a "$W/summary.txt"; }
{
  python -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())"
  git rev-parse --short HEAD 2>/dev/null || echo "no git"
  nvidia-smi; nproc; free -g
} > "$W/env.txt" 2>&1
head -2 "$W/env.txt"

# biokg-scale inputs, built on the CPU cores while the tests use the card
python - > "$W/build.log" 2>&1 <<'EOF' &
import sys, time
sys.path.insert(0, "benchmarks")
from pathlib import Path
t = time.time()
import message_passing
message_passing.load_graph(Path("/tmp/cmpnn_biokg_scale_csr.npz"))
print(f"graph cache {time.time() - t:.0f} s", flush=True)
import eval_throughput
eval_throughput.load(Path("/tmp/cmpnn_eval_bench"), False)
print(f"dataset {time.time() - t:.0f} s", flush=True)
EOF
BUILD=$!

if want tests; then
step "1 gpu tests"
CMPNN_TRITON_AUTOTUNE=0 timeout $(cap 100) python -m pytest -q -p no:cacheprovider --continue-on-collection-errors -m gpu tests > "$W/pytest_gpu.txt" 2>&1
echo "pytest -m gpu rc=$?" | tee -a "$W/summary.txt"; tail -3 "$W/pytest_gpu.txt"
CMPNN_TRITON_AUTOTUNE=0 timeout $(cap 90) python -m pytest -q -p no:cacheprovider tests/test_ops_fused.py >> "$W/pytest_gpu.txt" 2>&1
echo "pytest test_ops_fused rc=$?" | tee -a "$W/summary.txt"; tail -2 "$W/pytest_gpu.txt"
fi

if want e2e; then
step "3 end to end"
CMPNN_TRITON_CONFIGS="${TILINGS%%;4,128,2,3*}" timeout $(cap 220) python benchmarks/gpu_e2e.py --data-root .gpu/data --out "$W" > "$W/e2e.log" 2>&1
echo "gpu_e2e rc=$?" | tee -a "$W/summary.txt"
grep '^|\|SIGKILL' "$W"/gpu_e2e_*.md 2>/dev/null | cut -c1-220
fi

timeout $(cap 120) tail --pid=$BUILD -f /dev/null; cat "$W/build.log" | tee -a "$W/summary.txt"
if want layer; then
step "2 one layer"
CMPNN_TRITON_CONFIGS="$TILINGS" timeout $(cap 80) python benchmarks/message_passing.py --device cuda --reps 20 \
  --cases msg1_sum_fp32 msg1_sum_bf16 msg1_pna_fp32 --impls reference fused sparse_floor \
  --out "$W" > "$W/message_passing.log" 2>&1
echo "message_passing rc=$?" | tee -a "$W/summary.txt"
grep '^|' "$W"/message_passing_cuda_*.md | grep -v -- '---' | cut -c1-160 | head -24
fi

if want eval; then
step "4 evaluation"
CMPNN_TRITON_CONFIGS="${TILINGS%%;4,128,2,3*}" timeout $(cap 90) python benchmarks/eval_throughput.py --device cuda --impl auto --facts 512 --batch 64 \
  --threads 8 --out "$W/eval_throughput_cuda" > "$W/eval.log" 2>&1
echo "eval_throughput rc=$?" | tee -a "$W/summary.txt"
grep '^|' "$W/eval.log" | cut -c1-200
fi

if want step; then
step "5 train step"
CMPNN_TRITON_CONFIGS="${TILINGS%%;4,128,2,3*}" timeout $(cap 70) python benchmarks/train_step.py \
  --device cuda --reps 3 --impls fused reference --out "$W" > "$W/train_step.log" 2>&1
echo "train_step rc=$?" | tee -a "$W/summary.txt"
grep '^|' "$W"/train_step_cuda_*.md 2>/dev/null | cut -c1-160
fi

if want pruned; then
step "6 pruned propagation"
CMPNN_TRITON_CONFIGS="${TILINGS%%;4,128,2,3*}" timeout $(cap 100) ${PRUNED_CMD:-false} \
  > "$W/pruned.log" 2>&1
echo "pruned rc=$?" | tee -a "$W/summary.txt"; tail -25 "$W/pruned.log" | cut -c1-200
fi

step "done"
# at most 8 files come back: the summaries, plus everything in one archive
cp "$W/summary.txt" "$W/env.txt" "$OUT/" 2>/dev/null
cp "$W"/gpu_e2e_*.md "$W"/message_passing_cuda_*.md "$W"/eval_throughput_cuda.md \
  "$W"/train_step_cuda_*.md "$OUT/" 2>/dev/null
tar -czf "$OUT/gpu_session.tar.gz" -C "$W" --exclude='*.npz' . /tmp/cmpnn_gpu_e2e/logs 2>/dev/null
ls -la "$OUT"

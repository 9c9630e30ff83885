#!/usr/bin/env bash
# GPU checks for the fused Triton message passing (issue 5), one short script for a device run:
#   1. tests/test_ops_fused.py on CUDA (float64 parity + gradcheck on the compiled kernels,
#      and the @gpu float32-hub / bfloat16 checks), fixed tiling (no autotune) to save compiles;
#   2. benchmarks/message_passing.py --device cuda (autotuned), results into $OUT;
#   3. benchmarks/train_step.py --device cuda: full 6-layer training step, reference vs fused.
# Usage: OUT=/some/dir bash benchmarks/gpu_check.sh
set -u
OUT=${OUT:-/tmp/gpu_check}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export TRITON_DEFAULT_FP_FUSION=1
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
python -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())" \
  2>&1 | tee "$OUT/versions.txt"
t0=$(date +%s)
CMPNN_TRITON_AUTOTUNE=0 timeout "${TEST_TIMEOUT:-150}" python -m pytest tests/test_ops_fused.py -q \
  -p no:cacheprovider --durations=5 > "$OUT/pytest_gpu.txt" 2>&1
echo "pytest rc=$? in $(( $(date +%s) - t0 ))s" | tee -a "$OUT/pytest_gpu.txt"
tail -15 "$OUT/pytest_gpu.txt"
t0=$(date +%s)
timeout "${BENCH_TIMEOUT:-240}" python benchmarks/message_passing.py --device cuda --reps 10 \
  --out "$OUT" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.log" | grep -v '^|'
echo "bench rc=$? in $(( $(date +%s) - t0 ))s"
cat "$OUT"/message_passing_*.md 2>/dev/null
t0=$(date +%s)
timeout "${STEP_TIMEOUT:-200}" python benchmarks/train_step.py --device cuda --reps 5 \
  --impls reference fused --out "$OUT" 2>&1 | tee "$OUT/train_step.log" | grep -v '^|'
echo "train_step rc=$? in $(( $(date +%s) - t0 ))s"
cat "$OUT"/train_step_*.md 2>/dev/null

#!/usr/bin/env bash
# GPU checks for the fused Triton message passing (issue 5), one short script for a device run:
#   1. tests/unit/ops/test_ops_fused.py on CUDA (float64 parity + gradcheck on the compiled kernels,
#      and the @gpu float32-hub / bfloat16 checks), first tiling only (no autotune: compiles),
#      then the parity / GPU tests again with a column-tiled, hinted, software-pipelined
#      (stages 3), no-prefetch tiling;
#   2. benchmarks/message_passing.py --device cuda: reference, fused (autotuned over the whole
#      space in cmpnn_dist/ops/triton_tuning.py plus its opt-in software-pipelined configs,
#      CMPNN_TRITON_PIPELINE=1; every config's time kept in the tuning log)
#      and the torch.sparse floor, plus the device's copy bandwidth; every implementation's
#      outputs and gradients checked against the float32 reference on the benchmark graph
#      (benchmarks/output_check.py: catches a fast but wrong autotuned tiling);
#   3. benchmarks/profile_fused.py: wall vs GPU time vs CUDA-graph replay vs the profiler's
#      kernels for MSG 1 sum (where the op's time goes beyond the Triton kernels);
#   4. benchmarks/train_step.py --device cuda: a full 6-layer training step, reference vs fused
#      vs fused replayed from one CUDA graph (the step without host latency), with each impl's
#      first loss against the reference's;
#   3 and 4 with the fused space cut to the configs that won step 2 most often.
# Usage: OUT=/some/dir bash benchmarks/gpu_check.sh   (at most 8 files land in $OUT)
set -u
OUT=${OUT:-/tmp/gpu_check}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export TRITON_DEFAULT_FP_FUSION=1
export CMPNN_TRITON_PIPELINE=1  # the pipelined (stages 2 - 3) configs join the tuning space
{
  python -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())"
  nvidia-smi
} > "$OUT/env.txt" 2>&1
head -1 "$OUT/env.txt"
t0=$(date +%s)
CMPNN_TRITON_AUTOTUNE=0 timeout "${TEST_TIMEOUT:-150}" python -m pytest tests -k "test_ops_fused or gpu" -q \
  -p no:cacheprovider --durations=5 > "$OUT/pytest_gpu.txt" 2>&1  # every gpu-marked test too
echo "pytest rc=$? in $(( $(date +%s) - t0 ))s" | tee -a "$OUT/pytest_gpu.txt"
tail -4 "$OUT/pytest_gpu.txt"
t0=$(date +%s)
CMPNN_TRITON_CONFIGS="16,64,4,3,1,0" timeout "${TEST_TIMEOUT:-150}" python -m pytest \
  tests/unit/ops/test_ops_fused.py -q -p no:cacheprovider -k "parity or gpu_" >> "$OUT/pytest_gpu.txt" 2>&1
echo "pytest (16,64,4,3,1,0) rc=$? in $(( $(date +%s) - t0 ))s" | tee -a "$OUT/pytest_gpu.txt"
tail -2 "$OUT/pytest_gpu.txt"
t0=$(date +%s)
timeout "${BENCH_TIMEOUT:-270}" python benchmarks/message_passing.py --device cuda --reps 10 \
  --impls reference fused sparse_floor --out "$OUT" ${BENCH_ARGS:-} > "$OUT/logs.txt" 2>&1
echo "bench rc=$? in $(( $(date +%s) - t0 ))s"
grep -i copy "$OUT/logs.txt"
grep -h FAILED "$OUT"/message_passing_cuda_*.md && echo "OUTPUT CHECK FAILED (rows above)"
# the two configs that won the most autotuning runs above, for the training step
CONFIGS=$(python - "$OUT" <<'EOF'
import collections, glob, json, sys
logs = [json.load(open(p)).get("tuning_log", []) for p in glob.glob(sys.argv[1] + "/message_passing_cuda_*.json")]
wins = collections.Counter(t["best"] for log in logs for t in log)
print(";".join(c for c, _ in wins.most_common(2)))
EOF
)
echo "configs for profile and train step: ${CONFIGS:-default space}"
t0=$(date +%s)
CMPNN_TRITON_CONFIGS="$CONFIGS" timeout "${PROFILE_TIMEOUT:-90}" python benchmarks/profile_fused.py \
  --out "$OUT" 2>&1 | grep -v Warning | tee -a "$OUT/logs.txt"
echo "profile rc=$? in $(( $(date +%s) - t0 ))s"
t0=$(date +%s)
CMPNN_TRITON_CONFIGS="$CONFIGS" timeout "${STEP_TIMEOUT:-150}" python benchmarks/train_step.py \
  --device cuda --reps 5 --impls reference fused fused+graph --out "$OUT" >> "$OUT/logs.txt" 2>&1
echo "train_step rc=$? in $(( $(date +%s) - t0 ))s"
grep '^|' "$OUT"/message_passing_cuda_*.md | grep -v -- '---' | cut -c1-190
grep '^|' "$OUT"/train_step_cuda_*.md 2>/dev/null | cut -c1-190

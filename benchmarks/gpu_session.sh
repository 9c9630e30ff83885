#!/usr/bin/env bash
# One device call on a lent H100 / H200, prepared to fit a few minutes of card time. Steps, in
# the order they run (STEPS picks; default "layer pruned e2e profile precision wikikg2"):
#   tests     every `gpu`-marked test and the whole fused-kernel test file on the card;
#   layer     the one-layer benchmark (message_passing.py: reference, fused, the torch.sparse
#             floor, the output check) on the biokg-scale graph -> the three kernel targets;
#   pruned    pruned_speed.py on the biokg-scale graph: dense vs node_ratio 0.005 (PRUNED_RATIOS)
#             at batch 8 and 64 (PRUNED_BATCHES), training step and evaluation forward;
#   e2e       gpu_e2e.py: the default run and conf=fb237_ind_v1 on the card, fp32 and bf16
#             (E2E_RUNS; add cpu_default cpu_fb237 cuda_det cuda_killed for the CPU reference
#             and the SIGKILL + resume check);
#   profile   pruned_profile.py, biokg scale, batch 8, dense and 0.005: phases, host syncs,
#             kernel launches and device-to-host copies per training step and per evaluation
#             forward, profiler tables;
#   precision gpu_precision.py: bf16 vs fp32 training steps at biokg scale, dense and 0.005,
#             batch 8 and 64 (dense only at 64);
#   eval      eval_throughput.py --device cuda: forward batches per second per protocol;
#   step      train_step.py --device cuda: the 6-layer training step (reference vs fused);
#   wikikg2   pruned_speed.py on the wikikg2-scale graph, node_ratio 0.002 (WIKI_RATIOS), B 8,
#             with whatever time is left.
# Every step has its own time cap, and the whole script ends within BUDGET seconds (the device
# call's timeout_s should leave ~30 s more). After every step the results so far are copied to
# $OUT (at most 8 files: the summary, a few tables, everything in one archive), so a step cut
# short still leaves the earlier ones.
# The fused kernels' tuning space is cut to the six tilings that won the last full autotuning
# (benchmarks/results/fused_kernels_h200.md), plain edge loop (stages 1), per benchmark (not for
# the tests, one of which checks the default space).
# Python packages the card's image lacks (hydra-core, omegaconf, antlr4, ogb and its two
# dependencies) and the fb237_v1 raw files travel in the ignored folder .gpu/ (device notes):
#   .gpu/site/<package>/ (copied from a venv of this project), .gpu/data/inductive/fb237_v1{,_ind}
# Usage (on the card): OUT=/some/dir BUDGET=500 STEPS="layer pruned" bash benchmarks/gpu_session.sh
set -u
OUT=${OUT:-/tmp/gpu_session}
W=/tmp/gpu_work
mkdir -p "$OUT" "$W"
export PYTHONPATH="$PWD:$PWD/.gpu/site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export TRITON_DEFAULT_FP_FUSION=1
. benchmarks/gpu_tilings.sh  # TILINGS
STEPS=" ${STEPS:-layer pruned e2e profile precision wikikg2} "
want() { [[ "$STEPS" == *" $1 "* ]]; }
END=$(( $(date +%s) + ${BUDGET:-420} ))
# a step's cap: its own, or what is left before END less 15 s for the packing, at least 1 s
cap() { local left=$(( END - $(date +%s) - 15 )); (( left < $1 )) && echo $(( left > 1 ? left : 1 )) || echo "$1"; }
left() { echo $(( END - $(date +%s) - 15 )); }
step() { echo "== $1 $(date +%T) ($(left) s left)" | tee -a "$W/summary.txt"; }
rc() { echo "$1 rc=$2 ($(( $(date +%s) - T0 )) s)" | tee -a "$W/summary.txt"; }
pack() {  # the results so far into $OUT (overwritten after every step)
  cp "$W/summary.txt" "$OUT/" 2>/dev/null
  cp "$W"/message_passing_cuda_*.md "$W"/pruned_speed_cuda.md "$W"/gpu_e2e_*.md \
    "$W"/pruned_profile_cuda.txt "$W"/gpu_precision_cuda.md "$OUT/" 2>/dev/null
  tar -czf "$OUT/gpu_session.tar.gz.tmp" -C "$W" --exclude='*.npz' --exclude='*.tmp' . \
    /tmp/cmpnn_gpu_e2e/logs 2>/dev/null
  mv -f "$OUT/gpu_session.tar.gz.tmp" "$OUT/gpu_session.tar.gz"
}
{
  python -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())"
  git rev-parse --short HEAD 2>/dev/null || echo "no git"
  date -u; nvidia-smi; nproc; free -g
} > "$W/env.txt" 2>&1
head -2 "$W/env.txt" | tee -a "$W/summary.txt"

# biokg-scale CSR cache (and, for `eval`, the dataset), built on the CPU cores meanwhile
BUILD=""
if want layer || want eval || want step; then
  python - "$(want eval && echo eval)" > "$W/build.log" 2>&1 <<'EOF' &
import sys, time
sys.path.insert(0, "benchmarks")
from pathlib import Path
t = time.time()
import message_passing
message_passing.load_graph(Path("/tmp/cmpnn_biokg_scale_csr.npz"))
print(f"graph cache {time.time() - t:.0f} s", flush=True)
if sys.argv[1] == "eval":
    import eval_throughput
    eval_throughput.load(Path("/tmp/cmpnn_eval_bench"), False)
    print(f"dataset {time.time() - t:.0f} s", flush=True)
EOF
  BUILD=$!
fi
wait_build() {
  [[ -n "$BUILD" ]] && timeout "$(cap 120)" tail --pid="$BUILD" -f /dev/null
  cat "$W/build.log" >> "$W/summary.txt"; BUILD=""
}

if want tests; then
  step "gpu tests"; T0=$(date +%s)
  CMPNN_TRITON_AUTOTUNE=0 timeout "$(cap 100)" python -m pytest -q -p no:cacheprovider \
    --continue-on-collection-errors -m gpu tests > "$W/pytest_gpu.txt" 2>&1
  rc "pytest -m gpu" $?; tail -3 "$W/pytest_gpu.txt"
  CMPNN_TRITON_AUTOTUNE=0 timeout "$(cap 90)" python -m pytest -q -p no:cacheprovider \
    tests/unit/ops/test_ops_fused.py >> "$W/pytest_gpu.txt" 2>&1
  rc "pytest test_ops_fused" $?; tail -2 "$W/pytest_gpu.txt"
  pack
fi

if want layer; then
  wait_build
  step "one layer (kernel targets)"; T0=$(date +%s)
  CMPNN_TRITON_CONFIGS="$TILINGS" timeout "$(cap 80)" python benchmarks/message_passing.py \
    --device cuda --reps 20 --cases msg1_sum_fp32 msg1_sum_bf16 msg1_pna_fp32 \
    --impls reference fused sparse_floor --out "$W" > "$W/message_passing.log" 2>&1
  rc message_passing $?
  grep -i copy "$W/message_passing.log" | tee -a "$W/summary.txt"
  grep -h '^|' "$W"/message_passing_cuda_*.md | grep -v -- '---' | cut -c1-170 | head -16 \
    | tee -a "$W/summary.txt"
  pack
fi

if want pruned; then
  for b in ${PRUNED_BATCHES:-8 64}; do
    step "pruned speed biokg B $b"; T0=$(date +%s)
    CMPNN_TRITON_CONFIGS="$TILINGS" timeout "$(cap $(( b > 16 ? 80 : 60 )))" \
      python benchmarks/pruned_speed.py --graph biokg --device cuda \
      --ratios ${PRUNED_RATIOS:-dense 0.005} --rounds 3 --eval-rounds 3 --out "$W" --batch "$b" \
      --eval-batch "$(( b > 16 ? b : 16 ))" --label "biokg-b$b" >> "$W/pruned.log" 2>&1
    rc "pruned_speed biokg B $b" $?
    grep "^biokg " "$W/pruned.log" | tail -2 | tee -a "$W/summary.txt"
    pack
  done
fi

if want e2e; then
  step "end to end"; T0=$(date +%s)
  CMPNN_TRITON_CONFIGS="$TILINGS" timeout "$(cap 150)" python benchmarks/gpu_e2e.py \
    --data-root .gpu/data --out "$W" \
    --runs ${E2E_RUNS:-cuda_default cuda_fb237 cuda_default_bf16 cuda_fb237_bf16} \
    > "$W/e2e.log" 2>&1
  rc gpu_e2e $?
  grep '^{' "$W/e2e.log" | cut -c1-240 | tee -a "$W/summary.txt"
  pack
fi

if want profile; then
  step "pruned profile B 8 (launches, syncs)"; T0=$(date +%s)
  CMPNN_TRITON_CONFIGS="$TILINGS" timeout "$(cap 70)" python benchmarks/pruned_profile.py \
    --graph biokg --device cuda --ratios ${PROFILE_RATIOS:-0.005 dense} --batch 8 \
    --eval-batch 16 --out "$W" > "$W/profile.log" 2>&1
  rc pruned_profile $?
  grep '^==\|^host\|^per \|step .* ms, syncs' "$W/profile.log" | cut -c1-400 | tee -a "$W/summary.txt"
  pack
fi

if want precision; then
  for b in 8 64; do
    step "precision B $b"; T0=$(date +%s)
    cfgs="dense 0.005"; (( b > 16 )) && cfgs="dense"
    mkdir -p "$W/precision_b$b"
    CMPNN_TRITON_CONFIGS="$TILINGS" timeout "$(cap 60)" python benchmarks/gpu_precision.py \
      --device cuda --configs $cfgs --batch "$b" --rounds 5 --out "$W/precision_b$b" \
      > "$W/precision_b$b.log" 2>&1
    rc "gpu_precision B $b" $?
    grep '^| [d0]' "$W/precision_b$b"/gpu_precision_cuda.md 2>/dev/null | tee -a "$W/summary.txt"
    [[ $b == 8 ]] && cp "$W/precision_b8/gpu_precision_cuda.md" "$W/" 2>/dev/null
    pack
  done
fi

if want eval; then
  wait_build
  step "evaluation throughput"; T0=$(date +%s)
  CMPNN_TRITON_CONFIGS="$TILINGS" timeout "$(cap 90)" python benchmarks/eval_throughput.py \
    --device cuda --impl auto --facts 512 --batch 64 --threads 8 \
    --out "$W/eval_throughput_cuda" > "$W/eval.log" 2>&1
  rc eval_throughput $?; grep '^|' "$W/eval.log" | cut -c1-200
  pack
fi

if want step; then
  wait_build
  step "train step"; T0=$(date +%s)
  CMPNN_TRITON_CONFIGS="$TILINGS" timeout "$(cap 70)" python benchmarks/train_step.py \
    --device cuda --reps 3 --impls fused reference --out "$W" > "$W/train_step.log" 2>&1
  rc train_step $?; grep '^|' "$W"/train_step_cuda_*.md 2>/dev/null | cut -c1-160
  pack
fi

if want wikikg2; then
  step "pruned speed wikikg2 B 8"; T0=$(date +%s)
  if (( $(left) > 100 )); then
    CMPNN_TRITON_CONFIGS="$TILINGS" timeout "$(cap 400)" python benchmarks/pruned_speed.py \
      --graph wikikg2 --device cuda --ratios ${WIKI_RATIOS:-0.002} --rounds 3 --eval-rounds 3 \
      --out "$W" --batch 8 --eval-batch 16 --label wikikg2-b8 > "$W/wikikg2.log" 2>&1
    rc "pruned_speed wikikg2" $?
    grep "^wikikg2 \|built in" "$W/wikikg2.log" | tail -3 | tee -a "$W/summary.txt"
  else
    echo "skipped: $(left) s left" | tee -a "$W/summary.txt"
  fi
  pack
fi

step "done"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv \
  >> "$W/summary.txt" 2>&1
pack
ls -la "$OUT"

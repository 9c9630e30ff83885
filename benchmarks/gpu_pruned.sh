#!/usr/bin/env bash
# One device call for issue 26 on a lent card: the gpu-marked tests, then where a pruned
# training step's time goes on CUDA (benchmarks/pruned_profile.py: phases, host syncs,
# profiler tables) and the pruned speed beside dense (benchmarks/pruned_speed.py), biokg scale.
# Usage (on the card, repo root): OUT=/some/dir BUDGET=300 bash benchmarks/gpu_pruned.sh
# (STEPS, PROFILE_RATIOS, SPEED_RATIOS, SPEED_BATCHES, GRAPH, ROUNDS, SPEED_CAP: see below)
# Python packages the card's image lacks travel in the ignored folder .gpu/site (gpu_session.sh).
set -u
OUT=${OUT:-/tmp/gpu_pruned}
mkdir -p "$OUT"
export PYTHONPATH="$PWD:$PWD/.gpu/site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export TRITON_DEFAULT_FP_FUSION=1
. benchmarks/gpu_tilings.sh  # the fused kernels' tuning space: TILINGS
export CMPNN_TRITON_CONFIGS="$TILINGS"
END=$(( $(date +%s) + ${BUDGET:-300} ))
cap() { local left=$(( END - $(date +%s) - 10 )); (( left < $1 )) && echo $(( left > 1 ? left : 1 )) || echo "$1"; }
python -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())" \
  > "$OUT/env.txt" 2>&1; cat "$OUT/env.txt"
if [[ " ${STEPS:-tests profile speed} " == *" tests "* ]]; then
  CMPNN_TRITON_AUTOTUNE=0 timeout "$(cap 90)" python -m pytest -q -p no:cacheprovider \
    --continue-on-collection-errors -m gpu tests \
    > "$OUT/pytest_gpu.txt" 2>&1
  echo "pytest -m gpu rc=$?"; tail -3 "$OUT/pytest_gpu.txt"
fi
if [[ " ${STEPS:-tests profile speed} " == *" profile "* ]]; then
  timeout "$(cap 150)" python benchmarks/pruned_profile.py --graph biokg --device cuda \
    --ratios ${PROFILE_RATIOS:-dense 0.02 0.005} --out "$OUT" > "$OUT/profile.log" 2>&1
  echo "pruned_profile rc=$?"; grep -v USDT "$OUT/profile.log" | grep '^==\|^host\|step' | cut -c1-400
fi
if [[ " ${STEPS:-tests profile speed} " == *" speed "* ]]; then
  for b in ${SPEED_BATCHES:-8}; do  # one results entry per batch size (biokg-b<B>)
    timeout "$(cap ${SPEED_CAP:-150})" python benchmarks/pruned_speed.py --graph "${GRAPH:-biokg}" \
      --device cuda --ratios ${SPEED_RATIOS:-dense 0.02 0.005} --rounds "${ROUNDS:-3}" \
      --eval-rounds "${ROUNDS:-3}" --out "$OUT" --batch "$b" --eval-batch "$(( b > 16 ? b : 16 ))" \
      --label "${GRAPH:-biokg}-b$b" >> "$OUT/speed.log" 2>&1
    echo "pruned_speed B=$b rc=$?"; grep "^${GRAPH:-biokg}" "$OUT/speed.log" | tail -6
  done
fi
ls -la "$OUT"

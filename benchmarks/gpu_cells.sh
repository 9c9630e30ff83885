#!/usr/bin/env bash
# One device call on a lent H100 / H200: the inductive sweeps' unfinished cells, all at once on
# the card for TRAIN seconds (benchmarks/paper_inductive_card.py train), then packed into $OUT
# (cells.tgz.partNN, at most 15 MiB each; the summary and the cells' logs beside them). Here,
# afterwards: `python benchmarks/paper_inductive_card.py unpack --storage STORE <parts>`, then
# `paper_inductive.py run --storage STORE` goes on from the card's steps, or `save` archives them.
# The card's image lacks hydra-core, omegaconf and antlr4 and cannot download: they travel as
# .gpu/site.tgz (their folders from a venv of this project), the two GraIL splits' raw files as
# .gpu/data.tgz (inductive/<split>{,_ind}/ from ../shared/data); .gpu/ is git-ignored locally.
# Usage (on the card): OUT=/some/dir TRAIN=470 bash benchmarks/gpu_cells.sh (DEVICE=cpu: try it here)
set -u
OUT=${OUT:-/tmp/gpu_cells}
STORE=/tmp/cmpnn_cells
mkdir -p "$OUT" /tmp/site /tmp/data
tar -xzf .gpu/site.tgz -C /tmp/site && tar -xzf .gpu/data.tgz -C /tmp/data || exit 1
export PYTHONPATH="$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export TRITON_DEFAULT_FP_FUSION=1
. benchmarks/gpu_tilings.sh  # the fused kernels' tuning space: TILINGS
export CMPNN_TRITON_CONFIGS="$TILINGS"
{
  python -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())"
  date -u; nproc
} 2>&1 | tee "$OUT/summary.txt"
python benchmarks/paper_inductive_card.py train --storage "$STORE" --seconds "${TRAIN:-470}" \
  --device "${DEVICE:-cuda}" \
  data_root=/tmp/data train.num_threads=4 2>&1 | tee -a "$OUT/summary.txt"
for f in "$STORE"/card_logs/*.log; do echo "== $f"; grep -v "^\[cmpnn_dist\] epoch" "$f" | tail -n 8; done \
  >> "$OUT/summary.txt" 2>&1
tar -czf "$OUT/logs.tgz" -C "$STORE" card_logs
python benchmarks/paper_inductive_card.py pack --storage "$STORE" --out "$OUT" 2>&1 | tee -a "$OUT/summary.txt"
date -u | tee -a "$OUT/summary.txt"

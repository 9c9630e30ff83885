# Sourced by the device scripts (gpu_session.sh, gpu_cells.sh, gpu_pruned.sh): the fused
# kernels' tuning space cut to the six tilings that won the last full autotuning
# (results/fused_kernels_h200.md), in CMPNN_TRITON_CONFIGS's syntax
# "E,C,warps,stages,hints,prefetch;..." (cmpnn_dist/ops/triton_tuning.py).
TILINGS="4,128,2,1,0,1;2,256,1,1,0,1;16,64,4,1,0,0;8,64,2,1,0,0;2,256,2,1,0,1;16,64,4,1,0,1"

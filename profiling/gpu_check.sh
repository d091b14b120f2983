#!/usr/bin/env bash
# Profile the GPU at hand into datasets/<gpu-id>/ in about 7 minutes (H200): gemm, attention, elementwise, norm and
# optimizer in bf16, fp16, fp32 (TF32 off), tf32 and fp8, with every kernel's name, grid/block recorded; then the
# fp16 LLM token series (conf/profiling/gemm/llm_series.yaml: dense in the token count, what places cuBLAS's kernel
# choice steps); then print what the dataset holds. Resumable: run it again and it measures only what is missing.
#
#   profiling/gpu_check.sh                      # defaults: 4 minutes of measuring, then 2 of token series
#   BUDGET_MINUTES=8 SERIES_MINUTES=0 profiling/gpu_check.sh   # longer, no series; Hydra overrides can follow
#                                                              # (first stage only): ... gemm.max_points=400
#
# When $OUT is set (a device machine's result folder), the dataset is also copied to $OUT/datasets/<gpu-id>/
# (six files: five <family>.parquet and card.json).
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1

python - <<'PY'
import torch
assert torch.cuda.is_available(), "gpu_check.sh needs a CUDA GPU"
print("GPU:", torch.cuda.get_device_name(0), "| torch", torch.__version__, "| CUDA", torch.version.cuda)
PY
HW_ID=$(python -c "from profiling.hardware import detect; print(detect().id)")
echo "catalog id: ${HW_ID}"

python -m profiling hardware=auto \
    "families=[gemm,attention,elementwise,norm,optimizer]" \
    budget_minutes="${BUDGET_MINUTES:-4}" \
    measure.record_kernels=true \
    threads=null \
    hydra.run.dir="outputs/profiling/gpu_check" \
    "$@"

if [[ "${SERIES_MINUTES:-2}" != "0" ]]; then
    python -m profiling hardware=auto "families=[gemm]" gemm=llm_series \
        budget_minutes="${SERIES_MINUTES:-2}" \
        threads=null \
        hydra.run.dir="outputs/profiling/gpu_check_series"
fi

python -m profiling.summary "datasets/${HW_ID}"

if [[ -n "${OUT:-}" ]]; then
    mkdir -p "${OUT}/datasets"
    cp -r "datasets/${HW_ID}" "${OUT}/datasets/"
    echo "copied to ${OUT}/datasets/${HW_ID}"
fi

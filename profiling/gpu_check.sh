#!/usr/bin/env bash
# Profile the GPU at hand into datasets/<gpu-id>/ in about 8 minutes (H200): gemm, attention, elementwise, norm and
# optimizer in bf16, fp16, fp32 (TF32 off), tf32 and fp8, with every kernel's name, grid/block recorded; then the
# fp16 LLM token series (conf/profiling/gemm/llm_series.yaml: dense in the token count, what places cuBLAS's kernel
# choice steps); then print what the dataset holds; then time real training runs of examples/gpt.py and compare the
# emulator with them (stepcast validate). Resumable: run it again and it measures only what is missing.
#
#   profiling/gpu_check.sh                      # defaults: 4 minutes of measuring, then 2 of token series
#   BUDGET_MINUTES=8 SERIES_MINUTES=0 profiling/gpu_check.sh   # longer, no series; Hydra overrides can follow
#                                                              # (first stage only): ... gemm.max_points=400
#
# When $OUT is set (a device machine's result folder), the dataset is also copied to $OUT/datasets/<gpu-id>/
# (five <family>.parquet, card.json and real_runs/), and the comparisons to $OUT/validate/.
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

stepcast profile hardware=auto \
    "families=[gemm,attention,elementwise,norm,optimizer]" \
    budget_minutes="${BUDGET_MINUTES:-4}" \
    measure.record_kernels=true \
    threads=null \
    hydra.run.dir="outputs/profiling/gpu_check" \
    "$@"

if [[ "${SERIES_MINUTES:-2}" != "0" ]]; then
    stepcast profile hardware=auto "families=[gemm]" gemm=llm_series \
        budget_minutes="${SERIES_MINUTES:-2}" \
        threads=null \
        hydra.run.dir="outputs/profiling/gpu_check_series"
fi

python -m stepcast.profiling.summary "datasets/${HW_ID}"

# Real runs of examples/gpt.py on this GPU (REAL_RUNS=0 skips), kept in datasets/<gpu-id>/real_runs/ so the emulator
# can be checked against them later on any machine: stepcast validate --real FILE.
RUNS=("gpt-250m:--layers 12 --d-model 1024 --heads 16 --seq 1024 --batch 8 --vocab 50304 --steps 8"
      "gpt-1.3b:--preset 1.3b --steps 8")
if [[ "${REAL_RUNS:-1}" != "0" ]]; then
    mkdir -p "datasets/${HW_ID}/real_runs"
    for run in "${RUNS[@]}"; do
        python -m stepcast.emulate.measure_real --report "datasets/${HW_ID}/real_runs/${run%%:*}.json" \
            -- examples/gpt.py ${run#*:} || echo "real run ${run%%:*} failed"
    done
fi

if [[ -n "${OUT:-}" ]]; then
    mkdir -p "${OUT}/datasets"
    cp -r "datasets/${HW_ID}" "${OUT}/datasets/"
    echo "copied to ${OUT}/datasets/${HW_ID}"
fi

# The emulator against those real runs, here, with this machine's host CPU (VALIDATE=0 skips; the comparison
# needs no GPU and can be rerun anywhere).
if [[ "${VALIDATE:-1}" != "0" ]]; then
    for real in "datasets/${HW_ID}"/real_runs/*.json; do
        [[ -e "${real}" ]] || continue
        name=$(basename "${real}" .json)
        stepcast validate --real "${real}" --report "outputs/validate/${name}.json" || true
        if [[ -n "${OUT:-}" && -e "outputs/validate/${name}.json" ]]; then
            mkdir -p "${OUT}/validate"
            cp "outputs/validate/${name}.json" "${OUT}/validate/"
        fi
    done
fi

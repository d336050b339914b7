#!/usr/bin/env bash
# One-shot GPU session (issue 13): what a maintainer with a CUDA device runs, once, from the repository root.
#
#   bash harness/bench/gpu_session.sh [OUT_DIR]          (default OUT_DIR: reports/gpu-session)
#
# It prints the GPU, torch and CUDA versions, then runs, each with its wall time and exit code:
#   1. nox -s verify_gpu                      the verify gate on CUDA, float32 (TF32 off)
#   2. nox -s verify_gpu -- --dtype bfloat16  the same in bfloat16
#   3. nox -s bench -- --size large --device cuda    the bench on 1.1B-parameter models
#   4. nox -s bench -- --size medium --device cuda   the medium model, to set beside the CPU figures
#   5. nox -s verify_dist                     the two-process check (CPU, gloo), where it can run
# Every step's full output goes to OUT_DIR/<step>.log and the verify reports to OUT_DIR/<step>/;
# the summary at the end is what to paste into docs/bench.md. A failing step does not stop the others.
#
# Environment:
#   NOX="nox -R"    reuse the sessions' virtualenvs and skip their installs (a machine without PyPI)
#   NOX=none        no nox at all: run `python -m harness ...` with $PYTHON (default: python) instead
#   STEP_TIMEOUT    seconds per step (default 1800)
# Expect about 15 minutes on one H200 (the large bench builds three 1.1B models on the CPU first);
# the large size needs about 70 GB of GPU memory in float32.

set -u
cd "$(dirname "$0")/../.." || exit 2 # the repository root; OUT_DIR is relative to it
OUT=${1:-reports/gpu-session}
NOX=${NOX:-nox}
PYTHON=${PYTHON:-python}
STEP_TIMEOUT=${STEP_TIMEOUT:-1800}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
mkdir -p "$OUT"
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"

say() { echo "$*" | tee -a "$SUMMARY"; }

say "== gpu session $(date -u +%Y-%m-%dT%H:%M:%SZ) | commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
"$PYTHON" - <<'EOF' 2>&1 | tee -a "$SUMMARY"
import sys, torch
print("python", sys.version.split()[0], "| torch", torch.__version__, "| CUDA (torch build)", torch.version.cuda,
      "| cuDNN", torch.backends.cudnn.version())
if not torch.cuda.is_available():
    print("no CUDA device: this script is for a machine with one"); sys.exit(3)
for i in range(torch.cuda.device_count()):
    p = torch.cuda.get_device_properties(i)
    print(f"GPU {i}: {p.name}, {p.total_memory / 2**30:.0f} GiB, compute capability {p.major}.{p.minor}")
EOF
[ "${PIPESTATUS[0]}" -eq 3 ] && exit 3
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader \
  | sed 's/^/nvidia-smi: /' | tee -a "$SUMMARY"

# step NAME NOX_ARGS... :: PYTHON_ARGS...   (the python form runs when NOX=none)
step() {
  local name=$1
  shift
  local nox_args=() py_args=()
  while [ $# -gt 0 ] && [ "$1" != "::" ]; do nox_args+=("$1"); shift; done
  shift
  py_args=("$@")
  local start end code
  start=$(date +%s.%N)
  if [ "$NOX" = none ]; then
    timeout "$STEP_TIMEOUT" "$PYTHON" "${py_args[@]}" >"$OUT/$name.log" 2>&1
  else
    # shellcheck disable=SC2086
    timeout "$STEP_TIMEOUT" $NOX "${nox_args[@]}" >"$OUT/$name.log" 2>&1
  fi
  code=$?
  end=$(date +%s.%N)
  say ""
  say "== $name: exit $code, wall $(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }') s"
  # the lines worth keeping: the bench's figures, the gate's summary lines
  grep -E '^(bench|model|overhead|interval|live|both|  |memory|oracle|profile|wall|note|[0-9]+ (passed|failed))|(passed|failed|skipped|error)' \
    "$OUT/$name.log" | tail -n 40 | tee -a "$SUMMARY"
}

step verify_gpu_float32 -s verify_gpu -- --report-dir "$OUT/verify_gpu_float32" \
  :: -m harness verify --device cuda --report-dir "$OUT/verify_gpu_float32"
step verify_gpu_bfloat16 -s verify_gpu -- --dtype bfloat16 --report-dir "$OUT/verify_gpu_bfloat16" \
  :: -m harness verify --device cuda --dtype bfloat16 --report-dir "$OUT/verify_gpu_bfloat16"
step bench_large_cuda -s bench -- --size large --device cuda \
  :: -m harness.bench --size large --device cuda
step bench_medium_cuda -s bench -- --size medium --live --device cuda \
  :: -m harness.bench --size medium --live --device cuda
step verify_dist -s verify_dist -- --report-dir "$OUT/verify_dist" \
  :: -m harness verify-dist --report-dir "$OUT/verify_dist"
step live_trl_cuda -s live -- --target trl-grpo --device cuda \
  :: -m harness.live --target trl-grpo --device cuda

say ""
say "full logs: $OUT/*.log; verify reports: $OUT/verify_*/verify.json"

#!/usr/bin/env bash
# Everything a GPU runner is asked in one go, for machines lent for minutes: the driver's own
# view (nvidia-smi), the suite in run.py against the single-gpu spec, the hwprobe CLI on real
# NVML, and checkpoint_timing.py. No install: the checkout is put on PYTHONPATH under its import
# name, so the machine's python3 (with torch, pynvml and PyYAML) runs it as it is.
#
#   OUT=/some/dir bash e2e/gpu/run_all.sh [SPEC]        # SPEC defaults to single-gpu
#
# Every output lands in $OUT: nvidia-smi.txt, gpu-suite.json, hwprobe-*.txt, checkpoint.json,
# and log.txt with each step's exit code. Exit: the number of steps that failed.
set -u
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-$(mktemp -d)}
spec=${1:-single-gpu}
py=${PYTHON:-python3}
pkg=$(mktemp -d)
mkdir -p "$pkg/ckpt_preempt" "$out"
for part in policies controller hwprobe cli; do ln -s "$repo/$part" "$pkg/ckpt_preempt/$part"; done
export PYTHONPATH="$pkg:$repo" PYTHONUNBUFFERED=1
failed=0
step() {  # step NAME LIMIT_SECONDS COMMAND...: run, log its exit code, count a failure
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS rc
  timeout "$limit" "$@"; rc=$?
  echo "$name rc=$rc seconds=$((SECONDS - t0))" | tee -a "$out/log.txt"
  [ "$rc" -eq 0 ] || failed=$((failed + 1))
}
hwprobe=("$py" -c 'import sys; from ckpt_preempt.hwprobe.cli import main; sys.exit(main())')
{ date -u; uname -a; nvidia-smi; nvidia-smi topo -m; nvidia-smi nvlink --status; nvidia-smi -q
  "$py" -c 'import torch, pynvml; print("torch", torch.__version__, "cuda", torch.version.cuda)'
  "$py" -m pip show nvidia-ml-py 2>/dev/null | head -2; } >"$out/nvidia-smi.txt" 2>&1
step suite 180 "$py" "$repo/e2e/gpu/run.py" --expect "$spec" --out "$out/gpu-suite.json"
step cli-show 60 "${hwprobe[@]}" show >"$out/hwprobe-show.txt" 2>&1
step cli-verify 60 "${hwprobe[@]}" verify --expect "$spec" --samples 3 --interval 1 \
  >"$out/hwprobe-verify.txt" 2>&1
step cli-report 60 "${hwprobe[@]}" report --compact >"$out/hwprobe-report.txt" 2>&1
step checkpoint 200 "$py" "$repo/e2e/gpu/checkpoint_timing.py" --dir "$(mktemp -d)" \
  --gib 2 8 16 --out "$out/checkpoint.json"
echo "failed steps: $failed" | tee -a "$out/log.txt"
exit "$failed"

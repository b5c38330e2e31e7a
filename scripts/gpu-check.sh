#!/usr/bin/env bash
# The GPU run kit: one command on a machine with an NVIDIA GPU (Python, PyTorch with CUDA
# and nvidia-ml-py installed; nothing fetched). Runs the acceptance suite with NVML and
# CUDA (matmul, HBM, host<->device copies, a 120 s burn-in), scrapes the agent's /metrics
# once, and writes gpu-check.json (figures beside the published ceilings), metrics.txt
# and nvidia-smi.txt to the output folder: $OUT if set, else ./gpu-check-out.
# Under 8 minutes on an H200. `scripts/gpu-check.sh --dry-run` runs the same on
# simulated GPUs in virtual time, anywhere (the test suite does).
# Record the figures in docs/acceptance.md with the date.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-gpu-check-out}"
python="${PYTHON:-python3}"
if [ -x .venv/bin/python ] && [ -z "${PYTHON:-}" ] && [[ " $* " == *" --dry-run "* ]]; then
  python=.venv/bin/python
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
exec "$python" -m gpulease.agent.gpu.check_kit --out "$out" "$@"

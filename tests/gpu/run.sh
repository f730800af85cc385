#!/usr/bin/env bash
# One prepared script for the GPU machine (see DEVELOPERS.md): builds the GPU check from the
# kernels alone and runs it. Prints one table. Must finish well under 8 minutes.
set -euo pipefail
cd "$(dirname "$0")/../.."
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
cmake -S tests/gpu -B build-gpu -G Ninja >/dev/null
cmake --build build-gpu -j "$(nproc)"
build-gpu/gpu_check

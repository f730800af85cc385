#!/usr/bin/env bash
# The GPU check: one prepared script for a machine with an NVIDIA GPU and nvcc, cmake, ninja and
# a compiler, but none of our Debian packages. Prepare it here with scripts/gpu-bundle (the
# engine's binaries and their libraries in build-gpu-bundle/), carry that folder along, then run
# this there. It prints one table and writes it to $OUT/gpu-check.txt when OUT is set. Budget:
# under 8 minutes on an H200.
#   1. kernels, built there from kernels/ alone: CUDA = CPU bit for bit (FWHT, quantization,
#      mat-vec and mat-mat at the 27B shapes), device copy bandwidth, mat-vec share of it, FWHT
#      cost per token;
#   2. the engine on CUDA (cuda_engine_test): logits vs the CPU on tiny, small and the peer
#      model (bits, KL, greedy), schedule invariance, a prefix-cache hit (device copies of a
#      snapshot) equal to a cold run, the peer's greedy tokens;
#   3. end to end on 27B-shape synthetic models made there: TTFT for 2,048 tokens, decode
#      tokens/s at batch 1 and 16, PQ2_0 and PTQ1_0.
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
bundle=$root/build-gpu-bundle
out=${OUT:-$root/build-gpu-out}
mkdir -p "$out"
log=$out/gpu-check.txt
: >"$log"
say() { echo "$@" | tee -a "$log"; }
section() { say ""; say "== $* =="; }
failures=0

section "device"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | tee -a "$log"

section "1. kernels (built here from kernels/ alone)"
if cmake -S tests/gpu -B build-gpu -G Ninja >/dev/null && cmake --build build-gpu -j "$(nproc)" \
    >"$out/kernels-build.log" 2>&1; then
  build-gpu/gpu_check 2>&1 | tee -a "$log" || failures=$((failures + 1))
else
  say "kernel check: build failed (tail of $out/kernels-build.log follows)"
  tail -30 "$out/kernels-build.log" | tee -a "$log"
  failures=$((failures + 1))
fi

if [ ! -x "$bundle/bin/walsh-run" ]; then
  say "no build-gpu-bundle/: run scripts/gpu-bundle before carrying the tree here"
  exit 1
fi
export LD_LIBRARY_PATH=$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export WALSH_SOURCE_DIR=$root

section "2. engine conformance on CUDA"
timeout 240 "$bundle/bin/cuda_engine_test" 2>&1 | grep -E '^cuda vs cpu|^\[  (PASSED|FAILED|SKIPPED) |FAILED|Failure|error' |
  tee -a "$log"
[ "${PIPESTATUS[0]}" -eq 0 ] || failures=$((failures + 1))

section "3. end to end, 27B shape"
for fmt in pq2_0 ptq1_0; do
  model=/tmp/walsh-27b-$fmt.gguf
  start=$(date +%s)
  "$bundle/bin/walsh-mkmodel" --preset 27b --signs real --format "$fmt" --out "$model" \
    >"$out/mkmodel-$fmt.log" 2>&1 || { say "walsh-mkmodel $fmt failed"; failures=$((failures + 1)); continue; }
  say "made $model in $(( $(date +%s) - start )) s"
  timeout 200 "$bundle/bin/walsh-bench" decode --model "$model" --device cuda --batch 1,16 \
    --prompt 2048 --gen 64 --json "$out/bench-$fmt.json" 2>&1 | tee -a "$log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || failures=$((failures + 1))
  rm -f "$model"
done

section "summary"
say "failures: $failures"
exit $(( failures > 0 ))

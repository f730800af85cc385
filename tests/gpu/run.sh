#!/usr/bin/env bash
# The GPU check (docs/gpu-check.md): one command for a machine with an NVIDIA GPU, nvcc, cmake,
# ninja and a compiler but none of our Debian packages. It builds the engine-only target there
# from this tree and the kit that scripts/gpu-kit packs here (build-gpu-kit/kit.tar.gz: Abseil,
# ICU, nlohmann-json and GoogleTest as Debian ships them), then runs each step below under its
# own time budget, all inside one global deadline of 480 s. It writes the whole log to
# $OUT/gpu-check.log, a JSON summary to $OUT/gpu-check.json and each decode benchmark's JSON
# beside them ($OUT defaults to build-gpu-out/).
#
#   tests/gpu/run.sh            on the GPU machine: a missing device, a driver older than the
#                               runtime or a skipped CUDA test fails the check, never passes it
#   tests/gpu/run.sh --dry-run  here, without a GPU: packs the kit, builds exactly what the
#                               device would build from a clean build folder, proves that build
#                               read no header or library of Debian's outside the kit, and runs
#                               the CPU side of every step
#   --perf                      the performance run: no memcheck, PTQ1_0's end-to-end step
#                               trimmed (a 512-token prompt, 8 decode steps), a 300 s deadline
#   --only N                    step N alone (2, the build, must have run in this tree before
#                               for any later step), e.g. a rerun of the kernels on a warm machine
set -uo pipefail
self=$(realpath "$0")
cd "$(dirname "$self")/../.."
root=$(pwd)
mode=device
only=""
# --run-step FN: the script runs one step's function in a process of its own, so that one
# `timeout` bounds the whole step, every command in it.
run_step=""
while [ $# -gt 0 ]; do
  case $1 in
    --dry-run) mode=dry-run ;;
    --perf) export WALSH_GPU_PERF=1 ;;
    --only) only=$2 && shift ;;
    --run-step) run_step=$2 && shift ;;
    *) echo "tests/gpu/run.sh: unknown argument $1" >&2 && exit 2 ;;
  esac
  shift
done
perf=${WALSH_GPU_PERF:-0}

out=${OUT:-$root/build-gpu-out}
mkdir -p "$out"
log=$out/gpu-check.log
summary=$out/gpu-check.json
[ -n "$run_step" ] || : >"$log"
start=$(date +%s)
deadline=$((start + 480))
[ "$perf" = 1 ] && deadline=$((start + 300))
build=$root/build-gpu-engine
kit=$root/build-gpu-kit
steps_json=""
failures=0

say() { echo "$@" | tee -a "$log"; }

# The summary so far; `running` names the step in progress, so a run cut off from outside
# never reads as a pass ("complete": false until the end).
write_summary() {
  local running=${1:-} complete=${2:-false}
  printf '{"mode":"%s","complete":%s,"running":"%s","seconds":%d,"failures":%d,"steps":[%s]}\n' \
    "$mode" "$complete" "$running" $(($(date +%s) - start)) "$failures" "${steps_json#,}" \
    >"$summary"
}

# step NAME BUDGET_SECONDS FUNCTION: runs FUNCTION with at most BUDGET seconds for the whole step
# (and never past the global deadline) on the device; a dry run is timed but not cut off, this
# machine being slower. Records pass, fail, timeout or skipped.
step() {
  local name=$1 budget=$2 fn=$3 status rc t0
  # --only N runs step N alone; the others are left out of the summary.
  [ -n "$only" ] && [ "${name%%.*}" != "$only" ] && return 0
  say ""
  say "== $name (budget ${budget} s) =="
  write_summary "$name"
  t0=$(date +%s)
  local left=$((deadline - t0))
  if [ "$mode" = device ] && [ "$left" -le 0 ]; then
    status=skipped
    say "skipped: the global deadline has passed"
    failures=$((failures + 1))
  else
    local limit=$budget
    [ "$mode" = device ] && [ "$left" -lt "$limit" ] && limit=$left
    local args=(--run-step "$fn")
    [ "$mode" = dry-run ] && args=(--dry-run --run-step "$fn")
    if [ "$mode" = device ]; then
      timeout -k 5 "$limit" "$self" "${args[@]}" 2>&1 | tee -a "$log"
    else
      "$self" "${args[@]}" 2>&1 | tee -a "$log"
    fi
    rc=${PIPESTATUS[0]}
    case $rc in
      0) status=pass ;;
      124 | 137) status=timeout ;;
      *) status=fail ;;
    esac
    [ "$status" = pass ] || failures=$((failures + 1))
  fi
  local took=$(($(date +%s) - t0))
  say "-- $name: $status in ${took} s"
  steps_json+=$(printf ',{"name":"%s","status":"%s","seconds":%d,"budget_s":%d}' "$name" \
    "$status" "$took" "$budget")
  write_summary
}


device_info() {
  if [ "$mode" = dry-run ]; then
    echo "dry run: the device step queries nvidia-smi, and the kernel step the driver and runtime"
    command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || { echo "no nvcc"; return 1; }
    return 0
  fi
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || return 1
  (command -v nvcc >/dev/null && nvcc --version || /usr/local/cuda/bin/nvcc --version) | tail -2
}

build_engine() {
  if [ "$mode" = dry-run ]; then scripts/gpu-kit || return 1; fi
  [ -f "$kit/kit.tar.gz" ] || { echo "no $kit/kit.tar.gz: run scripts/gpu-kit here and carry it"; return 1; }
  rm -rf "$kit/kit" "$build"
  tar -C "$kit" -xzf "$kit/kit.tar.gz" || return 1
  cmake -S "$root" -B "$build" -G Ninja -DWALSH_ENGINE_ONLY=ON -DWALSH_CUDA=ON \
    -DCMAKE_PREFIX_PATH="$kit/kit" -DICU_ROOT="$kit/kit" >"$out/build.log" 2>&1 &&
    cmake --build "$build" -j "$(nproc)" --target walsh-bench walsh-mkmodel gpu_check \
      cuda_engine_test cuda_vision_encoder_test peer_conformance_test engine_schedule_test \
      prefix_cache_test nccl_communicator_test \
      >>"$out/build.log" 2>&1
  local rc=$?
  if [ $rc -ne 0 ]; then
    tail -40 "$out/build.log"
    return $rc
  fi
  echo "built $(ls "$build"/tools/walsh-bench "$build"/tools/walsh-mkmodel "$build"/tests/gpu_check \
    "$build"/tests/cuda_engine_test | wc -l) binaries in $build"
  # Everything from the kit: no header or library of Debian's own beyond the C and C++ runtimes.
  local leaks
  leaks=$(ninja -C "$build" -t deps 2>/dev/null |
    grep -E '^ +/usr/include/(absl|unicode|nlohmann|gtest|gmock|grpc|grpcpp|google|openssl)/' |
    sort -u | head -5)
  leaks+=$(grep -oE '/usr/lib/x86_64-linux-gnu/lib(absl|icu|gtest|gmock|grpc|protobuf|ssl|crypto)[^ ]*' \
    "$build/build.ninja" | sort -u | head -5)
  if [ -n "$leaks" ]; then
    echo "the engine-only build read files outside the kit:"
    echo "$leaks"
    return 1
  fi
  echo "the engine-only build read no Debian header or library outside the kit"
}

kernels() {
  local json=(--json "$out/matvec-sweep.json")
  if [ "$mode" = dry-run ]; then
    "$build/tests/gpu_check" --dry-run "${json[@]}"
  else
    "$build/tests/gpu_check" "${json[@]}"
  fi
}

conformance() {
  if [ "$mode" = device ]; then
    # CUDA ranks over NCCL have a step of their own (8), with NCCL's environment.
    WALSH_REQUIRE_CUDA=1 "$build/tests/cuda_engine_test" --gtest_brief=1 \
      --gtest_filter="-$tensor_parallel_filter" || return 1
    WALSH_REQUIRE_CUDA=1 "$build/tests/cuda_vision_encoder_test" --gtest_brief=1
    return
  fi
  # The CPU side: the same properties on the CPU backend, and the CUDA test binaries skipping.
  local t
  for t in peer_conformance_test engine_schedule_test prefix_cache_test cuda_engine_test \
    cuda_vision_encoder_test; do
    "$build/tests/$t" --gtest_brief=1 || return 1
  done
}

memcheck_filter='Models/CudaEngine.MatchesTheCpuBitForBit/0:Models/CudaEngine.ImageInputsMatchTheCpuBitForBit/0'
vision_memcheck_filter='CudaVisionEncoder.AttentionInManyLaunchesChangesNoBit'
memcheck() {
  local listed
  listed=$("$build/tests/cuda_engine_test" --gtest_list_tests --gtest_filter="$memcheck_filter" |
    grep -c '^  ')
  [ "$listed" -eq 2 ] || { echo "the memcheck filter selects $listed tests, not 2"; return 1; }
  listed=$("$build/tests/cuda_vision_encoder_test" --gtest_list_tests \
    --gtest_filter="$vision_memcheck_filter" | grep -c '^  ')
  [ "$listed" -eq 1 ] || { echo "the vision memcheck filter selects $listed tests, not 1"; return 1; }
  local sanitizer
  sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  if [ "$mode" = dry-run ]; then
    echo "dry run: would run $sanitizer --tool memcheck on $memcheck_filter (tiny, PQ2_0)"
    echo "dry run: and on $vision_memcheck_filter (the small projector)"
    return 0
  fi
  if [ ! -x "$sanitizer" ]; then
    echo "compute-sanitizer not found: the memcheck step fails"
    return 1
  fi
  WALSH_REQUIRE_CUDA=1 "$sanitizer" --tool memcheck --error-exitcode 1 \
    "$build/tests/cuda_engine_test" --gtest_filter="$memcheck_filter" --gtest_brief=1 || return 1
  WALSH_REQUIRE_CUDA=1 "$sanitizer" --tool memcheck --error-exitcode 1 \
    "$build/tests/cuda_vision_encoder_test" --gtest_filter="$vision_memcheck_filter" --gtest_brief=1
}

# NCCL from the machine's Python wheel (nvidia-nccl: nvidia/nccl/lib/libnccl.so.2), unless
# WALSH_NCCL_LIBRARY names one already; empty when there is none.
nccl_library() {
  if [ -n "${WALSH_NCCL_LIBRARY:-}" ]; then
    echo "$WALSH_NCCL_LIBRARY"
    return
  fi
  local python
  for python in python3 /usr/bin/python3; do
    command -v "$python" >/dev/null || continue
    "$python" -c 'import os, nvidia.nccl as n
for d in n.__path__:
    p = os.path.join(d, "lib", "libnccl.so.2")
    if os.path.exists(p): print(p); break' 2>/dev/null && return
  done
}

# CUDA ranks over NCCL in one process: TP 2 and 4 on this one GPU (NCCL 2.30's multi-rank mode,
# with NVLS off and few CTAs, as projects that share a GPU between ranks set it), logits
# bit-identical to one CUDA rank and to the CPU; then the communicator's own logic against the
# fake NCCL.
tensor_parallel_filter='Ranks/CudaTensorParallel.*'
tensor_parallel() {
  "$build/tests/nccl_communicator_test" --gtest_brief=1 || return 1
  if [ "$mode" = dry-run ]; then
    echo "dry run: would run $tensor_parallel_filter with NCCL_MULTI_RANK_GPU_ENABLE=1 on the device"
    "$build/tests/cuda_engine_test" --gtest_brief=1 --gtest_filter="$tensor_parallel_filter"
    return
  fi
  local library
  library=$(nccl_library)
  [ -n "$library" ] || { echo "no libnccl.so.2: neither WALSH_NCCL_LIBRARY nor the nvidia-nccl wheel"; return 1; }
  echo "NCCL: $library"
  WALSH_NCCL_LIBRARY=$library NCCL_MULTI_RANK_GPU_ENABLE=1 NCCL_NVLS_ENABLE=0 NCCL_MAX_CTAS=4 \
    WALSH_REQUIRE_NCCL=1 WALSH_REQUIRE_CUDA=1 \
    "$build/tests/cuda_engine_test" --gtest_brief=1 --gtest_filter="$tensor_parallel_filter"
}

# 27B-shape synthetic models made there: TTFT for 2,048 tokens, decode at batch 1 and 16. A
# slice of WALSH_GPU_LAYERS layers (16 by default, of 64) keeps the step inside its budget. Then
# PQ2_0's per-op profile of a short run (CUDA events around every launch, apart from the timed
# run so the marks cost it nothing): profile-pq2_0.json.
end_to_end() {
  local layers=${WALSH_GPU_LAYERS:-16} fmt model device=cuda preset=27b prompt gen
  [ "$mode" = dry-run ] && device=cpu && preset=small
  for fmt in pq2_0 ptq1_0; do
    model=/tmp/walsh-gpu-check-$fmt.gguf
    prompt=2048 gen=32
    [ "$perf" = 1 ] && [ "$fmt" = ptq1_0 ] && prompt=512 gen=8
    [ "$mode" = dry-run ] && prompt=64 gen=2
    if [ "$preset" = 27b ]; then
      "$build/tools/walsh-mkmodel" --preset 27b --signs real --layers "$layers" \
        --format "$fmt" --out "$model" || return 1
    else
      "$build/tools/walsh-mkmodel" --preset "$preset" --format "$fmt" --out "$model" || return 1
    fi
    "$build/tools/walsh-bench" decode --model "$model" --device "$device" --batch 1,16 \
      --prompt "$prompt" --gen "$gen" --no-bandwidth --json "$out/bench-$fmt.json" || return 1
    if [ "$fmt" = pq2_0 ]; then
      "$build/tools/walsh-bench" decode --model "$model" --device "$device" --batch 1 \
        --prompt 64 --gen 8 --no-bandwidth --profile --json "$out/profile-$fmt.json" || return 1
    fi
    rm -f "$model"
  done
}

# The vision encoder at the released projector's shape: 448² and 1024² images on the GPU (2048²
# waits until these are timed: its attention rereads every key for every query).
vision() {
  if [ "$mode" = dry-run ]; then
    "$build/tools/walsh-bench" vision --device cpu --preset small --sides 64,224 \
      --json "$out/bench-vision.json"
    return
  fi
  "$build/tools/walsh-bench" vision --device cuda --sides 448,1024 \
    --json "$out/bench-vision.json"
}

export LD_LIBRARY_PATH=$kit/kit/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export WALSH_SOURCE_DIR=$root
if [ -n "$run_step" ]; then
  "$run_step"
  exit $?
fi

options="$mode${only:+, step $only only}$([ "$perf" = 1 ] && echo ", --perf")"
tree=$(git rev-parse --short HEAD 2>/dev/null || echo '?')
say "walsh GPU check ($options), $(date -u +%FT%TZ), tree $tree"
step "1. device" 10 device_info
step "2. build (engine-only target, from source)" 150 build_engine
if [ -n "$only" ] && [ "$only" -gt 2 ] && [ ! -x "$build/tests/gpu_check" ]; then
  say "--only $only: nothing built in $build (run step 2 first)"
  failures=$((failures + 1))
fi
if [ -x "$build/tests/gpu_check" ]; then
  step "3. kernels: CUDA = CPU bit for bit, bandwidth over 4 weight copies, sweep" 120 kernels
  step "4. conformance: logits, KL, schedule invariance, prefix cache" 120 conformance
  # Run fifth, numbered 8: the steps' numbers name them (--only) and predate it.
  step "8. tensor parallel over NCCL on one GPU: TP 2 and 4 = one rank" 60 tensor_parallel
  if [ "$perf" = 1 ]; then
    [ -z "$only" ] || [ "$only" = 5 ] && say "-- 5. memcheck: not run (--perf)"
  else
    step "5. compute-sanitizer memcheck, tiny model and small projector" 90 memcheck
  fi
  step "6. end to end, 27B shape: TTFT 2,048, decode batch 1 and 16" 240 end_to_end
  step "7. vision encoder, 27B projector shape: 448², 1024²" 90 vision
fi
say ""
say "failures: $failures (summary in $summary)"
write_summary "" true
exit $((failures > 0))

#!/usr/bin/env bash
# The CUDA kernels' static check (docs/gpu-check.md "Without a GPU"): what can be proven of the
# hot kernels with nvcc alone, no device and no cuobjdump. It compiles each source of
# kernels/cuda for sm_90 with the build's flags and fails when
#   - a kernel spills registers to local memory (ptxas -v: "N bytes spill stores", N > 0), or a
#     ternary product kernel (ternary_*.cu) uses local memory at all ("N bytes stack frame");
#   - a lanes mat-vec kernel (ternary_matvec.cu) issues no 128-bit global load
#     (ld.global[.nc].v4 in its PTX);
#   - a tensor-core product kernel (ternary_mma.cu) issues no int8 mma (mma.sync m16n8k16 s8).
# Prints each kernel's registers and spills. Usage: tests/gpu/static_check.sh [NVCC]
set -uo pipefail
cd "$(dirname "$0")/../.."
nvcc=${1:-${NVCC:-/usr/local/cuda/bin/nvcc}}
[ -x "$nvcc" ] || command -v "$nvcc" >/dev/null || { echo "no nvcc at $nvcc"; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
flags=(-std=c++17 -arch=sm_90 --fmad=false -I.)
failures=0

# Device code only (-cubin: no host compile), keeping each source's PTX for ptx_has below.
for src in kernels/cuda/*.cu; do
  name=$(basename "$src" .cu)
  if ! "$nvcc" "${flags[@]}" -cubin -Xptxas -v --keep --keep-dir "$tmp" "$src" \
    -o "$tmp/$name.cubin" >"$tmp/$name.ptxas" 2>&1; then
    cat "$tmp/$name.ptxas"
    echo "FAIL $src does not compile"
    failures=$((failures + 1))
    continue
  fi
  # ptxas prints, per entry: "Compiling entry function 'NAME'", then its stack and spills, then
  # its registers.
  awk -v file="$name" '
    /Compiling entry function/ {
      match($0, /'"'"'[^'"'"']*'"'"'/); fn = substr($0, RSTART + 1, RLENGTH - 2); spills = 0; stack = 0
    }
    /spill stores/ { stack = $1; spills = $5 }
    /Used [0-9]+ registers/ && fn != "" {
      match($0, /Used [0-9]+ registers/); regs = substr($0, RSTART + 5, RLENGTH - 15)
      printf "%s %s %d %d %d\n", file, fn, regs, spills, stack; fn = ""
    }' "$tmp/$name.ptxas" >>"$tmp/kernels"
done

while read -r file fn regs spills stack; do
  short=$(echo "$fn" | sed -E 's/.*[0-9]+([A-Z][A-Za-z0-9]*Kernel)(I.*)?E?v.*/\1\2/' | cut -c1-70)
  printf "%-16s %-70s %4d regs %4d B spilled %4d B stack\n" "$file" "$short" "$regs" "$spills" \
    "$stack"
  if [[ $file == ternary_* ]] && [ "$stack" -gt 0 ]; then
    echo "FAIL $file: $fn uses $stack bytes of local memory (stack frame)"
    failures=$((failures + 1))
  fi
  if [ "$spills" -gt 0 ]; then
    echo "FAIL $file: $fn spills $spills bytes to local memory"
    failures=$((failures + 1))
  fi
done <"$tmp/kernels"
if [ ! -s "$tmp/kernels" ]; then
  echo "FAIL no kernel found in ptxas output"
  failures=$((failures + 1))
fi

# ptx_has SOURCE ENTRY INSTRUCTION WHAT: every PTX entry of SOURCE (its PTX kept above) whose
# name holds ENTRY must issue an instruction matching INSTRUCTION (an extended regex), and there
# must be one such entry.
ptx_has() {
  local src=$1 entry=$2 instruction=$3 what=$4 name found=0 fn hit
  name=$(basename "$src" .cu)
  [ -s "$tmp/$name.ptx" ] || {
    echo "FAIL $name: no PTX kept"
    failures=$((failures + 1))
    return
  }
  while read -r fn hit; do
    case $fn in *"$entry"*) ;; *) continue ;; esac
    found=$((found + 1))
    if [ "$hit" != 1 ]; then
      echo "FAIL $name: $fn issues no $what"
      failures=$((failures + 1))
    fi
  done < <(PATTERN=$instruction awk '
    /^(\.visible |\.weak )?\.entry / {
      name = $0; sub(/.*\.entry /, "", name); sub(/\(.*/, "", name); hit[name] = 0; order[++n] = name
    }
    $0 ~ ENVIRON["PATTERN"] && n > 0 { hit[order[n]] = 1 }
    END { for (i = 1; i <= n; ++i) print order[i], hit[order[i]] }' "$tmp/$name.ptx")
  if [ "$found" -eq 0 ]; then
    echo "FAIL $name: no $entry entry in the PTX"
    failures=$((failures + 1))
  fi
  echo "$found $entry kernels checked for $what"
}

# The lanes layout exists so that lanes load 16-byte runs; the batched product exists to use
# the int8 tensor cores.
ptx_has kernels/cuda/ternary_matvec.cu LanesMatMulKernel 'ld\.global(\.nc)?\.v4\.' \
  "128-bit global load"
int8_mma='mma\.sync\.aligned\.m16n8k16\.row\.col\.s32\.s8\.s8\.s32'
ptx_has kernels/cuda/ternary_mma.cu MmaMatMulKernel "$int8_mma" "int8 mma"
echo "$failures failure(s)"
[ "$failures" -eq 0 ]

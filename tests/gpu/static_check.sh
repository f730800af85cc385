#!/usr/bin/env bash
# The CUDA kernels' static check (docs/gpu-check.md "Without a GPU"): what can be proven of the
# hot kernels with nvcc alone, no device and no cuobjdump. It compiles each source of
# kernels/cuda for sm_90 with the build's flags and fails when
#   - a kernel spills registers to local memory (ptxas -v: "N bytes spill stores", N > 0);
#   - a lanes mat-vec kernel (ternary_matvec.cu) issues no 128-bit global load
#     (ld.global[.nc].v4 in its PTX): the layout exists so that lanes load 16-byte runs.
# Prints each kernel's registers and spills. Usage: tests/gpu/static_check.sh [NVCC]
set -uo pipefail
cd "$(dirname "$0")/../.."
nvcc=${1:-${NVCC:-/usr/local/cuda/bin/nvcc}}
[ -x "$nvcc" ] || command -v "$nvcc" >/dev/null || { echo "no nvcc at $nvcc"; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
flags=(-std=c++17 -arch=sm_90 --fmad=false -I.)
failures=0

for src in kernels/cuda/*.cu; do
  name=$(basename "$src" .cu)
  if ! "$nvcc" "${flags[@]}" -c -Xptxas -v "$src" -o "$tmp/$name.o" >"$tmp/$name.ptxas" 2>&1; then
    cat "$tmp/$name.ptxas"
    echo "FAIL $src does not compile"
    failures=$((failures + 1))
    continue
  fi
  # ptxas prints, per entry: "Compiling entry function 'NAME'", then its stack and spills, then
  # its registers.
  awk -v file="$name" '
    /Compiling entry function/ { match($0, /'"'"'[^'"'"']*'"'"'/); fn = substr($0, RSTART + 1, RLENGTH - 2) }
    /spill stores/ { spills = $5 }
    /Used [0-9]+ registers/ && fn != "" {
      match($0, /Used [0-9]+ registers/); regs = substr($0, RSTART + 5, RLENGTH - 15)
      printf "%s %s %d %d\n", file, fn, regs, spills; fn = ""
    }' "$tmp/$name.ptxas" >>"$tmp/kernels"
done

while read -r file fn regs spills; do
  short=$(echo "$fn" | sed -E 's/.*[0-9]+([A-Z][A-Za-z0-9]*Kernel)(I.*)?E?v.*/\1\2/' | cut -c1-70)
  printf "%-16s %-70s %4d regs %4d B spilled\n" "$file" "$short" "$regs" "$spills"
  if [ "$spills" -gt 0 ]; then
    echo "FAIL $file: $fn spills $spills bytes to local memory"
    failures=$((failures + 1))
  fi
done <"$tmp/kernels"
[ -s "$tmp/kernels" ] || { echo "FAIL no kernel found in ptxas output"; failures=$((failures + 1)); }

# 128-bit loads in every lanes mat-vec entry of the PTX.
"$nvcc" "${flags[@]}" -ptx kernels/cuda/ternary_matvec.cu -o "$tmp/matvec.ptx" || exit 2
entries=$(awk '
  /^(\.visible )?\.entry / { name = $0; sub(/.*\.entry /, "", name); sub(/\(.*/, "", name)
                             wide[name] = 0; order[++n] = name }
  /ld\.global(\.nc)?\.v4\./ && n > 0 { wide[order[n]] = 1 }
  END { for (i = 1; i <= n; ++i) print order[i], wide[order[i]] }' "$tmp/matvec.ptx")
lanes=0
while read -r fn wide; do
  case $fn in *LanesMatMulKernel*) ;; *) continue ;; esac
  lanes=$((lanes + 1))
  if [ "$wide" != 1 ]; then
    echo "FAIL ternary_matvec: $fn issues no 128-bit global load"
    failures=$((failures + 1))
  fi
done <<<"$entries"
[ "$lanes" -gt 0 ] || { echo "FAIL no lanes mat-vec entry in the PTX"; failures=$((failures + 1)); }
echo "$lanes lanes mat-vec kernels checked for 128-bit loads"
echo "$failures failure(s)"
[ "$failures" -eq 0 ]

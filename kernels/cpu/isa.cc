#include "kernels/cpu/isa.h"

#if WALSH_X86_KERNELS
#include <cpuid.h>
#endif

namespace walsh {
namespace {

#if WALSH_X86_KERNELS

// F16C from CPUID leaf 1 (ECX bit 29): clang 14's __builtin_cpu_supports does not know "f16c".
bool HasF16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
}
#endif

}  // namespace

const char* CpuIsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kScalar:
      return "scalar";
    case CpuIsa::kAvx2:
      return "avx2";
    case CpuIsa::kAvx512Vnni:
      return "avx512vnni";
    case CpuIsa::kAvx512Vbmi:
      return "avx512vbmi";
  }
  return "?";
}

bool CpuSupports(CpuIsa isa) {
#if !WALSH_X86_KERNELS
  return isa == CpuIsa::kScalar;
#else
  __builtin_cpu_init();
  switch (isa) {
    case CpuIsa::kScalar:
      return true;
    case CpuIsa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && HasF16c();
    case CpuIsa::kAvx512Vnni:
      return CpuSupports(CpuIsa::kAvx2) && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512vnni");
    case CpuIsa::kAvx512Vbmi:
      return CpuSupports(CpuIsa::kAvx512Vnni) && __builtin_cpu_supports("avx512vbmi");
  }
  return false;
#endif
}

CpuIsa BestCpuIsa() {
  // vpdpbusd multiplies and adds four bytes per lane in one instruction where AVX2 needs
  // maddubs, an int16 add and a widening madd: measured 1.04-1.25x faster on the project's AMD
  // EPYC (Zen 4) VM (bench/RESULTS.md, BM_TernaryMatMul).
  // VBMI decodes a PTQ1_0 block in about three fifths of the instructions: 1.19x at one token
  // (bench/RESULTS.md, "2026-12-05 (later)").
  if (CpuSupports(CpuIsa::kAvx512Vbmi)) return CpuIsa::kAvx512Vbmi;
  if (CpuSupports(CpuIsa::kAvx512Vnni)) return CpuIsa::kAvx512Vnni;
  if (CpuSupports(CpuIsa::kAvx2)) return CpuIsa::kAvx2;
  return CpuIsa::kScalar;
}

}  // namespace walsh

// Instruction-set paths of the CPU kernels, picked at run time from CPUID.
#ifndef WALSH_KERNELS_CPU_ISA_H_
#define WALSH_KERNELS_CPU_ISA_H_

// Whether the AVX2 and AVX-512 kernels are built: on x86-64 unless the build asks for the
// portable scalar path alone (cmake -DWALSH_NATIVE_ISA=OFF defines WALSH_SCALAR_ONLY).
#if (defined(__x86_64__) || defined(_M_X64)) && !defined(WALSH_SCALAR_ONLY)
#define WALSH_X86_KERNELS 1
#else
#define WALSH_X86_KERNELS 0
#endif

namespace walsh {

enum class CpuIsa {
  kScalar,  // portable reference; every other path must equal it bit for bit
  kAvx2,
  kAvx512Vnni,
  kAvx512Vbmi,  // kAvx512Vnni's kernels, with VBMI's byte permute for the PTQ1_0 decode
};

const char* CpuIsaName(CpuIsa isa);
// True when this build has the path and this CPU can run it.
bool CpuSupports(CpuIsa isa);
// The path that runs by default: the fastest this CPU supports, as measured (isa.cc).
CpuIsa BestCpuIsa();

}  // namespace walsh

#endif  // WALSH_KERNELS_CPU_ISA_H_

// Instruction-set paths of the CPU kernels, picked at run time from CPUID.
#ifndef WALSH_KERNELS_CPU_ISA_H_
#define WALSH_KERNELS_CPU_ISA_H_

namespace walsh {

enum class CpuIsa {
  kScalar,  // portable reference; every other path must equal it bit for bit
  kAvx2,
  kAvx512Vnni,
};

const char* CpuIsaName(CpuIsa isa);
bool CpuSupports(CpuIsa isa);
// The path that runs by default: the fastest this CPU supports, as measured (isa.cc).
CpuIsa BestCpuIsa();

}  // namespace walsh

#endif  // WALSH_KERNELS_CPU_ISA_H_

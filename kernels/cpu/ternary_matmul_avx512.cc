// AVX-512 VNNI ternary kernel (kernels/cpu/ternary_kernel_vnni.h), for CPUs without VBMI.
#include "kernels/cpu/ternary_kernel_vnni.h"
#include "kernels/cpu/ternary_matmul.h"

namespace walsh {

void TernaryMatMulQ8Avx512Vnni(const TernaryProduct& p, int64_t row_begin, int64_t row_end) {
  MatMulAnyFormat<VnniDot>(p, row_begin, row_end);
}

}  // namespace walsh

// AVX-512 VNNI ternary kernel with VBMI (kernels/cpu/ternary_kernel_vnni.h): compiled with
// -mavx512vbmi, so PTQ1_0's codes are decoded by DecodePtq1Vbmi.
#include "kernels/cpu/ternary_kernel_vnni.h"
#include "kernels/cpu/ternary_matmul.h"

#ifndef __AVX512VBMI__
#error "ternary_matmul_avx512vbmi.cc needs -mavx512vbmi"
#endif

namespace walsh {

void TernaryMatMulQ8Avx512Vbmi(const TernaryProduct& p, int64_t row_begin, int64_t row_end) {
  MatMulAnyFormat<VnniDot>(p, row_begin, row_end);
}

}  // namespace walsh

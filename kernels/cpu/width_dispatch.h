// A run-time count to a compile-time one, for kernels whose register blocks are template widths:
// DispatchWidth<kMax>(n, f) calls f(std::integral_constant<int, w>{}) with w = n clamped to
// [1, kMax].
#ifndef WALSH_KERNELS_CPU_WIDTH_DISPATCH_H_
#define WALSH_KERNELS_CPU_WIDTH_DISPATCH_H_

#include <cstdint>
#include <type_traits>

namespace walsh {

template <int kMax, typename F>
void DispatchWidth(int64_t n, F&& f) {
  static_assert(kMax >= 1);
  if constexpr (kMax == 1) {
    f(std::integral_constant<int, 1>{});
  } else {
    if (n >= kMax) return f(std::integral_constant<int, kMax>{});
    DispatchWidth<kMax - 1>(n, f);
  }
}

}  // namespace walsh

#endif  // WALSH_KERNELS_CPU_WIDTH_DISPATCH_H_

// The yardstick decode speed is measured against: how fast this machine's cores can stream
// memory they only read. Each thread sums its part of a buffer far larger than the caches
// through four independent load streams with AVX2 accumulators (scalar where AVX2 is absent);
// the best of several passes counts. The buffer is read through the page size asked for, so the
// yardstick can match the weights' (walsh-bench decode matches it to --weights-memory).
#ifndef WALSH_KERNELS_CPU_MEMORY_BANDWIDTH_H_
#define WALSH_KERNELS_CPU_MEMORY_BANDWIDTH_H_

#include <cstdint>

namespace walsh {

enum class YardstickPages { kSmall, kHuge };  // MADV_NOHUGEPAGE or MADV_HUGEPAGE (2 MiB)

// Read bandwidth in bytes per second with `threads` threads over `bytes` of memory.
double MeasureReadBandwidth(int threads, int64_t bytes = int64_t{2} << 30, int passes = 5,
                            YardstickPages pages = YardstickPages::kSmall);

// Sums n floats through four interleaved streams (AVX2); exposed for the dispatcher.
float SumFourStreamsAvx2(const float* p, int64_t n);

}  // namespace walsh

#endif  // WALSH_KERNELS_CPU_MEMORY_BANDWIDTH_H_

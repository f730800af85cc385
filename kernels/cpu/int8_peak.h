// The yardstick batched ternary products are measured against: how many int8 multiply-adds per
// second this machine's cores can issue. Each thread runs twelve independent dependency chains
// of one instruction on registers only (no memory traffic); the best of 15 passes counts (the
// shared VMs here read up to a third low in a single pass).
// A multiply-add is one int8 × int8 product added into a sum, so vpmaddubsw counts 32 per
// instruction on 256-bit registers, as does vpdpbusd, and vpdpbusd 64 on 512-bit ones. Where a
// core has 512-bit datapaths (Zen 5) both widths issue at the same rate, so only the width the
// kernel multiplies with is its peak (bench/RESULTS.md, 2026-12-05, the yardstick corrected).
#ifndef WALSH_KERNELS_CPU_INT8_PEAK_H_
#define WALSH_KERNELS_CPU_INT8_PEAK_H_

#include <cstdint>

namespace walsh {

enum class Int8PeakInstruction {
  kMaddubs,    // AVX2 vpmaddubsw: the instruction the AVX2 kernel multiplies with
  kDpbusd,     // AVX-512 VNNI vpdpbusd on 256-bit registers
  kDpbusd512,  // the same on 512-bit registers: the VNNI kernel's (its codes are 512 bits wide)
};

// Multiply-adds per second over `threads` threads, or 0 where this build or CPU lacks the
// instruction.
double MeasureInt8Peak(int threads, Int8PeakInstruction instruction, int passes = 15);

// One thread's chains: `iterations` rounds of 12 instructions; returns a value that depends on
// every result. Per-ISA files, for the dispatcher.
int32_t RunMaddubsChains(int64_t iterations);
int32_t RunDpbusdChains(int64_t iterations);
int32_t RunDpbusd512Chains(int64_t iterations);

}  // namespace walsh

#endif  // WALSH_KERNELS_CPU_INT8_PEAK_H_

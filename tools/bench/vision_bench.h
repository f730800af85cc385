// walsh-bench vision: the vision encoder's speed on one device (docs/vision.md §3). It writes a
// synthetic projector of a preset (the released one's shape by default: 27 blocks of 1152, F16
// weights), loads it as walsh-worker --mmproj does, on the CPU or a CUDA device, and encodes a
// square image of each side: seconds per image (the median of --repeat runs; on CUDA after one
// warm-up encode of the first side), tokens, and GFLOP/s by the cost formula of §3.
//
//   walsh-bench vision [--device cpu|cuda] [--sides 448,1024] [--preset 27b] [--threads N]
//                      [--repeat N] [--json FILE]
#ifndef WALSH_TOOLS_BENCH_VISION_BENCH_H_
#define WALSH_TOOLS_BENCH_VISION_BENCH_H_

namespace walsh {

int VisionBenchMain(int argc, char** argv);

}  // namespace walsh

#endif  // WALSH_TOOLS_BENCH_VISION_BENCH_H_

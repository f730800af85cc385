// The kernel check, for a machine with an NVIDIA GPU (tests/gpu/run.sh builds and runs it; it
// needs only nvcc, cmake and a compiler). CUDA kernels against the CPU kernels on the same
// inputs, bit for bit: the signed FWHT (with and without the GDN permutation), the int8
// quantization, the ternary mat-vec and mat-mat, the vision encoder's linear layer, LayerNorm and
// GELUs; then the device-to-device copy bandwidth, the mat-vec's speed at the 27B shapes against
// it, the rotation's cost, and the vision linear layer's speed; then the sweep of the lanes
// mat-vec's variants (kernels/cuda/ternary_matvec.cu) at the 27B products, each compared with the
// file-layout kernel bit for bit and timed, written as JSON with registers, spills and occupancy
// (--json PATH). Prints one table; exits non-zero on any mismatch.
#include <cuda_runtime.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/block_types.h"
#include "kernels/cpu/f32_matmul.h"
#include "kernels/cpu/hadamard.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/ternary_matmul.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/vision_ops.h"
#include "kernels/float_convert.h"
#include "kernels/hadamard_ref.h"
#include "kernels/ternary_codec_ref.h"
#include "kernels/ternary_lanes_layout.h"
#include "kernels/vision_numerics.h"

namespace walsh {
namespace {

int failures = 0;
// --dry-run: build every case's inputs and CPU result, and stop before the first CUDA call (what
// tests/gpu/run.sh --dry-run proves on a machine without a GPU).
bool dry_run = false;

#define CUDA_OK(expr)                                                                             \
  do {                                                                                            \
    const cudaError_t e_ = (expr);                                                                \
    if (e_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(e_)); \
      std::exit(2);                                                                               \
    }                                                                                             \
  } while (0)

template <typename T>
T* ToDevice(const std::vector<T>& v) {
  T* d = nullptr;
  CUDA_OK(cudaMalloc(&d, v.size() * sizeof(T)));
  CUDA_OK(cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

template <typename T>
std::vector<T> FromDevice(const T* d, size_t n) {
  std::vector<T> v(n);
  CUDA_OK(cudaMemcpy(v.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
  return v;
}

void Report(const char* what, bool ok, const char* detail = "") {
  std::printf("%-44s %s %s\n", what, ok ? "ok  " : "FAIL", detail);
  failures += !ok;
}

std::vector<uint8_t> RandomWeights(TernaryFormat type, int64_t rows, int64_t cols,
                                   std::mt19937& gen) {
  const size_t bb = FormatTraits(type).block_bytes;
  std::vector<uint8_t> out(rows * cols / 128 * bb);
  uint8_t codes[128];
  for (size_t b = 0; b < out.size() / bb; ++b) {
    for (uint8_t& c : codes) c = gen() % 3;
    if (type == TernaryFormat::kPq2_0) {
      PackBlockPq2_0(codes, FloatToFp16(0.01f + (gen() % 100) * 1e-4f),
                     reinterpret_cast<block_pq2_0*>(out.data()) + b);
    } else {
      PackBlockPtq1_0(codes, FloatToFp16(0.01f + (gen() % 100) * 1e-4f),
                      reinterpret_cast<block_ptq1_0*>(out.data()) + b);
    }
  }
  return out;
}

// Random bytes for every code (both formats decode any byte; PQ2_0's code 3 means +2) and a small
// positive scale in every block: the sweep's 27B-sized inputs in well under a second.
std::vector<uint8_t> FastRandomWeights(TernaryFormat type, int64_t rows, int64_t cols,
                                       std::mt19937& gen) {
  const size_t bb = FormatTraits(type).block_bytes;
  std::vector<uint8_t> out(rows * cols / 128 * bb);
  std::mt19937_64 bytes(gen());
  for (size_t i = 0; i + 8 <= out.size(); i += 8) {
    const uint64_t v = bytes();
    std::memcpy(&out[i], &v, 8);
  }
  const size_t scale_at = type == TernaryFormat::kPq2_0 ? 0 : 26;
  for (size_t b = 0; b < out.size() / bb; ++b) {
    const uint16_t d = FloatToFp16(0.01f + (bytes() % 100) * 1e-4f);
    std::memcpy(&out[b * bb + scale_at], &d, 2);
  }
  return out;
}

float TimeMs(const std::function<void()>& f, int iters) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  f();
  cudaEventRecord(start);
  for (int i = 0; i < iters; ++i) f();
  cudaEventRecord(stop);
  cudaEventSynchronize(stop);
  float ms = 0;
  cudaEventElapsedTime(&ms, start, stop);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  // A launch that failed leaves its error: the time means nothing then.
  if (cudaGetLastError() != cudaSuccess) return -1.0f;
  return ms / iters;
}

void CheckTransformAndQuantization(std::mt19937& gen) {
  // 27B widths with block 1024, then the tiny preset's 384 with block 128 and one token (an odd
  // count of 128-blocks), and the GDN output permutation (16 key heads x 3, head 128).
  struct Case {
    int64_t n, block, tokens;
    bool permute;
  };
  for (const Case c :
       {Case{5120, 1024, 3, false}, Case{6144, 1024, 3, false}, Case{17408, 1024, 3, false},
        Case{384, 128, 1, false}, Case{6144, 1024, 2, true}}) {
    const int64_t n = c.n, tokens = c.tokens, block = c.block;
    std::vector<float> x(tokens * n);
    std::normal_distribution<float> dist;
    for (float& v : x) v = dist(gen);
    std::vector<int8_t> signs(n);
    for (int8_t& s : signs) s = gen() & 1 ? 1 : -1;
    std::vector<float> ref(x.size()), permuted(n);
    const cuda::Permutation perm = c.permute ? cuda::Permutation{16, 3, 128} : cuda::Permutation{};
    for (int64_t t = 0; t < tokens; ++t) {
      const float* src = x.data() + t * n;
      if (c.permute) {
        GdnPermuteRef(src, perm.n_k, perm.rep, perm.hd, permuted.data());
        src = permuted.data();
      }
      SignedFwhtForward(CpuIsa::kScalar, src, signs.data(), n, block, ref.data() + t * n);
    }
    if (dry_run) {
      for (int64_t t = 0; t < tokens; ++t) {
        std::vector<Q8Block128> q(n / 128);
        QuantizeRowQ8(ref.data() + t * n, n, Q8Layout::kPq2Planes, q.data());
      }
      std::printf("cpu side of the FWHT and quantization checks, width %lld: ready\n",
                  static_cast<long long>(n));
      continue;
    }
    float* dx = ToDevice(x);
    int8_t* ds = ToDevice(signs);
    float* dy = nullptr;
    CUDA_OK(cudaMalloc(&dy, x.size() * sizeof(float)));
    CUDA_OK(static_cast<cudaError_t>(
        cuda::SignedFwht(dx, tokens, n, block, ds, nullptr, perm, dy, nullptr)));
    const std::vector<float> got = FromDevice(dy, x.size());
    char label[96], detail[96];
    const float rot_ms =
        TimeMs([&] { cuda::SignedFwht(dx, 1, n, block, ds, nullptr, perm, dy, nullptr); }, 200);
    std::snprintf(label, sizeof label, "signed FWHT%s, width %lld, bit-identical",
                  c.permute ? " + GDN permutation" : "", static_cast<long long>(n));
    std::snprintf(detail, sizeof detail, "%.1f us per token", rot_ms * 1e3);
    Report(label, std::memcmp(got.data(), ref.data(), ref.size() * 4) == 0, detail);
    for (Q8Layout layout : {Q8Layout::kPtq1Lanes, Q8Layout::kPq2Planes}) {
      std::vector<Q8Block128> qref(tokens * n / 128);
      for (int64_t t = 0; t < tokens; ++t)
        QuantizeRowQ8(ref.data() + t * n, n, layout, &qref[t * n / 128]);
      Q8Block128* dq = nullptr;
      CUDA_OK(cudaMalloc(&dq, qref.size() * sizeof(Q8Block128)));
      CUDA_OK(static_cast<cudaError_t>(cuda::QuantizeRowsQ8(dy, tokens, n, layout, dq, nullptr)));
      CUDA_OK(cudaDeviceSynchronize());
      const std::vector<Q8Block128> qgot = FromDevice(dq, qref.size());
      std::snprintf(label, sizeof label, "int8 quantization, width %lld, %s",
                    static_cast<long long>(n),
                    layout == Q8Layout::kPtq1Lanes ? "ptq1-lanes" : "planes");
      Report(label, std::memcmp(qgot.data(), qref.data(), qref.size() * sizeof(Q8Block128)) == 0);
      CUDA_OK(cudaFree(dq));
    }
    CUDA_OK(cudaFree(dx));
    CUDA_OK(cudaFree(ds));
    CUDA_OK(cudaFree(dy));
  }
}

double CopyBandwidth() {
  const size_t bytes = size_t{1} << 30;
  void *a = nullptr, *b = nullptr;
  CUDA_OK(cudaMalloc(&a, bytes));
  CUDA_OK(cudaMalloc(&b, bytes));
  CUDA_OK(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice));
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaEventRecord(start);
  for (int i = 0; i < 10; ++i) CUDA_OK(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice));
  cudaEventRecord(stop);
  cudaEventSynchronize(stop);
  float ms = 0;
  cudaEventElapsedTime(&ms, start, stop);
  cudaFree(a);
  cudaFree(b);
  return 2.0 * bytes * 10 / (ms * 1e-3) / 1e9;  // read + write
}

constexpr int kWeightCopies = 4;

void CheckMatMul(std::mt19937& gen, double copy_gbs) {
  for (TernaryFormat type : {TernaryFormat::kPq2_0, TernaryFormat::kPtq1_0}) {
    for (const std::pair<int64_t, int64_t> shape :
         {std::pair<int64_t, int64_t>{17408, 5120}, {5120, 17408}, {5120, 6144}, {248320, 5120}}) {
      const int64_t rows = shape.first, cols = shape.second;
      const std::vector<uint8_t> w = RandomWeights(type, rows, cols, gen);
      std::vector<uint8_t> lanes(w.size());
      RepackToLanes(type, w.data(), rows, cols, lanes.data());
      // Timed over kWeightCopies copies in turn, so the 50 MB L2 cannot hold the weights.
      uint8_t* dw[kWeightCopies] = {};
      uint8_t* dl[kWeightCopies] = {};
      for (int c = 0; c < kWeightCopies && !dry_run; ++c) {
        dw[c] = ToDevice(w);
        dl[c] = ToDevice(lanes);
      }
      for (int64_t tokens : {1, 3, 16}) {           // each lane assignment of the kernel
        if (tokens > 1 && rows > 100000) continue;  // the output head: decode only
        std::vector<float> x(tokens * cols);
        std::normal_distribution<float> dist;
        for (float& v : x) v = dist(gen);
        std::vector<Q8Block128> q(tokens * cols / 128);
        for (int64_t t = 0; t < tokens; ++t) {
          QuantizeRowQ8(x.data() + t * cols, cols, Q8LayoutFor(type), &q[t * cols / 128]);
        }
        std::vector<float> ref(tokens * rows);
        TernaryMatMulQ8(BestCpuIsa(), {type, w.data(), rows, cols}, q.data(), tokens, ref.data(),
                        rows, 0, rows);
        if (dry_run) {
          std::printf("cpu side of mat-mul %s %lldx%lld, %lld token(s): ready\n",
                      FormatTraits(type).name, static_cast<long long>(rows),
                      static_cast<long long>(cols), static_cast<long long>(tokens));
          continue;
        }
        Q8Block128* dq = ToDevice(q);
        float* dy = nullptr;
        CUDA_OK(cudaMalloc(&dy, tokens * rows * sizeof(float)));
        TernaryProduct products[kWeightCopies];
        for (int c = 0; c < kWeightCopies; ++c)
          products[c] = TernaryProduct::Whole({type, dw[c], rows, cols}, dq, tokens, dy, rows);
        CUDA_OK(static_cast<cudaError_t>(cuda::TernaryMatMulQ8(products[0], rows, nullptr)));
        const std::vector<float> got = FromDevice(dy, tokens * rows);
        int turn = 0;
        const float ms = TimeMs(
            [&] { cuda::TernaryMatMulQ8(products[turn++ % kWeightCopies], rows, nullptr); }, 48);
        const double gbs = w.size() / (ms * 1e-3) / 1e9;
        char label[96], detail[128];
        std::snprintf(label, sizeof label, "mat-mul %s %lldx%lld, %lld token(s), bit-identical",
                      FormatTraits(type).name, static_cast<long long>(rows),
                      static_cast<long long>(cols), static_cast<long long>(tokens));
        std::snprintf(detail, sizeof detail, "%.3f ms, weights %.0f GB/s = %.0f%% of copy", ms, gbs,
                      100 * gbs / copy_gbs);
        Report(label, std::memcmp(got.data(), ref.data(), ref.size() * 4) == 0, detail);
        // The same product on the lanes layout: the mat-vec up to 4 tokens, then tensor cores.
        for (int c = 0; c < kWeightCopies; ++c)
          products[c].w = {type, dl[c], rows, cols, TernaryLayout::kLanes};
        CUDA_OK(cudaMemset(dy, 0xff, tokens * rows * sizeof(float)));
        CUDA_OK(static_cast<cudaError_t>(cuda::TernaryMatMulQ8(products[0], rows, nullptr)));
        const std::vector<float> lanes_got = FromDevice(dy, tokens * rows);
        const float lanes_ms = TimeMs(
            [&] { cuda::TernaryMatMulQ8(products[turn++ % kWeightCopies], rows, nullptr); }, 48);
        const double lanes_gbs = w.size() / (lanes_ms * 1e-3) / 1e9;
        std::snprintf(label, sizeof label, "%s %s %lldx%lld, %lld token(s), bit-identical",
                      tokens >= cuda::kMmaMinTokens ? "mma" : "lanes", FormatTraits(type).name,
                      static_cast<long long>(rows), static_cast<long long>(cols),
                      static_cast<long long>(tokens));
        std::snprintf(detail, sizeof detail, "%.3f ms, weights %.0f GB/s = %.0f%% of copy",
                      lanes_ms, lanes_gbs, 100 * lanes_gbs / copy_gbs);
        Report(label, std::memcmp(lanes_got.data(), ref.data(), ref.size() * 4) == 0, detail);
        cudaFree(dq);
        cudaFree(dy);
      }
      for (int c = 0; c < kWeightCopies && !dry_run; ++c) {
        cudaFree(dw[c]);
        cudaFree(dl[c]);
      }
    }
  }
}

// The lanes mat-vec's variants (quads in flight × warps per CTA) at the 27B products and 1 to 4
// tokens, then at 16, 64 and 512 tokens its default beside the tensor-core product: each against
// the file-layout kernel's bits (CheckMatMul holds that kernel equal to the CPU), timed over
// kWeightCopies copies, with its registers, spills and occupancy. Rows go to `json` (a JSON array).
void SweepLanesMatVec(std::mt19937& gen, double read_gbs, const char* json_path) {
  struct Shape {
    int64_t rows, cols;
    const char* what;
  };
  const Shape shapes[] = {{17408, 5120, "ffn gate/up"}, {5120, 17408, "ffn down"},
                          {10240, 5120, "gdn qkv"},     {6144, 5120, "gdn z"},
                          {5120, 6144, "gdn/attn out"}, {248320, 5120, "output head"}};
  // Each row is written as it is measured, so a run cut short keeps what it measured.
  FILE* json = json_path != nullptr && !dry_run ? std::fopen(json_path, "w") : nullptr;
  if (json_path != nullptr && !dry_run && json == nullptr) {
    Report("write the sweep's JSON", false, json_path);
  }
  int json_rows = 0;
  if (json != nullptr) std::fputs("[\n", json);
  if (!dry_run) {
    std::printf(
        "sweep: each variant against the file-layout kernel's bits, on random bytes (PQ2_0 "
        "code 3 and PTQ1_0 bytes past 242 included)\n");
  }
  const cuda::MatVecVariant defaults;
  for (TernaryFormat type : {TernaryFormat::kPq2_0, TernaryFormat::kPtq1_0}) {
    for (const Shape& sh : shapes) {
      const std::vector<uint8_t> w = FastRandomWeights(type, sh.rows, sh.cols, gen);
      std::vector<uint8_t> lanes(w.size());
      RepackToLanes(type, w.data(), sh.rows, sh.cols, lanes.data());
      if (dry_run) {
        std::printf("cpu side of the lanes sweep, %s %lldx%lld: repacked\n",
                    FormatTraits(type).name, static_cast<long long>(sh.rows),
                    static_cast<long long>(sh.cols));
        continue;
      }
      uint8_t* dfile = ToDevice(w);
      uint8_t* dl[kWeightCopies] = {};
      for (uint8_t*& d : dl) d = ToDevice(lanes);
      for (int64_t tokens : {1, 2, 4, 16, 64, 512}) {
        if (sh.rows > 100000 && tokens > 4) continue;  // the output head: decode only
        std::vector<float> x(tokens * sh.cols);
        std::normal_distribution<float> dist;
        for (float& v : x) v = dist(gen);
        std::vector<Q8Block128> q(tokens * sh.cols / 128);
        for (int64_t t = 0; t < tokens; ++t) {
          QuantizeRowQ8(&x[t * sh.cols], sh.cols, Q8LayoutFor(type), &q[t * sh.cols / 128]);
        }
        Q8Block128* dq = ToDevice(q);
        float* dy = nullptr;
        CUDA_OK(cudaMalloc(&dy, tokens * sh.rows * sizeof(float)));
        const TernaryProduct base =
            TernaryProduct::Whole({type, dfile, sh.rows, sh.cols}, dq, tokens, dy, sh.rows);
        CUDA_OK(static_cast<cudaError_t>(cuda::TernaryMatMulQ8(base, sh.rows, nullptr)));
        const std::vector<float> want = FromDevice(dy, tokens * sh.rows);
        TernaryProduct products[kWeightCopies];
        for (int c = 0; c < kWeightCopies; ++c) {
          products[c] = TernaryProduct::Whole(
              {type, dl[c], sh.rows, sh.cols, TernaryLayout::kLanes}, dq, tokens, dy, sh.rows);
        }
        // Up to 4 tokens every mat-vec variant; past that the mat-vec's default beside the
        // tensor-core product, which TernaryMatMulQ8 picks there.
        struct Case {
          bool mma;
          cuda::MatVecVariant v;
        };
        std::vector<Case> cases;
        if (tokens < cuda::kMmaMinTokens) {
          for (int quads : {1, 2, 4}) {
            for (int warps : {4, 8}) {
              cases.push_back({false, {quads, warps}});
              if (type == TernaryFormat::kPtq1_0) cases.push_back({false, {quads, warps, true}});
            }
          }
        } else {
          cases = {{false, defaults}, {true, defaults}};
        }
        for (const Case& k : cases) {
          const bool is_default = k.mma == (tokens >= cuda::kMmaMinTokens) &&
                                  k.v.quads_in_flight == defaults.quads_in_flight &&
                                  k.v.warps_per_cta == defaults.warps_per_cta &&
                                  k.v.ptq1_table == defaults.ptq1_table;
          auto run = [&](const TernaryProduct& product) {
            return k.mma ? cuda::TernaryMatMulQ8Mma(product, sh.rows, nullptr)
                         : cuda::TernaryMatMulQ8Lanes(product, sh.rows, k.v, nullptr);
          };
          CUDA_OK(cudaMemset(dy, 0xff, tokens * sh.rows * sizeof(float)));
          CUDA_OK(static_cast<cudaError_t>(run(products[0])));
          const std::vector<float> got = FromDevice(dy, tokens * sh.rows);
          const bool same = std::memcmp(got.data(), want.data(), want.size() * 4) == 0;
          int turn = 0;
          const float ms =
              TimeMs([&] { run(products[turn++ % kWeightCopies]); }, tokens >= 64 ? 8 : 48);
          const double gbs = w.size() / (ms * 1e-3) / 1e9;
          const double tops = 2.0 * sh.rows * sh.cols * tokens / (ms * 1e-3) / 1e12;
          cuda::KernelFootprint fp;
          CUDA_OK(
              static_cast<cudaError_t>(k.mma ? cuda::MmaKernelFootprint(type, &fp)
                                             : cuda::LanesKernelFootprint(type, tokens, k.v, &fp)));
          const std::string name = k.mma ? std::string("mma")
                                         : "q" + std::to_string(k.v.quads_in_flight) + " w" +
                                               std::to_string(k.v.warps_per_cta);
          char label[120], detail[200];
          std::snprintf(label, sizeof label, "sweep %s %lldx%lld %lld tok %s%s",
                        FormatTraits(type).name, static_cast<long long>(sh.rows),
                        static_cast<long long>(sh.cols), static_cast<long long>(tokens),
                        name.c_str(), is_default ? " (default)" : "");
          std::snprintf(detail, sizeof detail,
                        "%.4f ms, %.0f GB/s = %.0f%% of read, %.1f int8 TOPS, %d regs, %d B "
                        "local, %d CTA/SM",
                        ms, gbs, 100 * gbs / read_gbs, tops, fp.registers, fp.local_bytes,
                        fp.ctas_per_sm);
          Report(label, same && ms > 0, detail);
          char row[480];
          std::snprintf(
              row, sizeof row,
              "%s{\"format\":\"%s\",\"product\":\"%s\",\"rows\":%lld,\"cols\":%lld,"
              "\"tokens\":%lld,\"kernel\":\"%s\",\"ptq1_table\":%s,\"quads_in_flight\":%d,"
              "\"warps_per_cta\":%d,\"default\":%s,\"bit_identical\":%s,\"ms\":%.5f,"
              "\"weight_gbs\":%.1f,\"read_share\":%.4f,\"int8_tops\":%.2f,"
              "\"registers\":%d,\"local_bytes\":%d,\"ctas_per_sm\":%d}",
              json_rows > 0 ? ",\n" : "", FormatTraits(type).name, sh.what,
              static_cast<long long>(sh.rows), static_cast<long long>(sh.cols),
              static_cast<long long>(tokens), k.mma ? "mma" : "lanes",
              k.v.ptq1_table ? "true" : "false", k.mma ? 0 : k.v.quads_in_flight,
              k.mma ? fp.threads / 32 : k.v.warps_per_cta, is_default ? "true" : "false",
              same ? "true" : "false", ms, gbs, gbs / read_gbs, tops, fp.registers, fp.local_bytes,
              fp.ctas_per_sm);
          if (json != nullptr && ms > 0) {
            std::fputs(row, json);
            std::fflush(json);
            ++json_rows;
          }
        }
        cudaFree(dq);
        cudaFree(dy);
      }
      cudaFree(dfile);
      for (uint8_t* d : dl) cudaFree(d);
    }
  }
  if (json != nullptr) {
    std::fputs("\n]\n", json);
    std::fclose(json);
  }
}

// The vision encoder's float32 linear layer against the CPU's (every CPU path gives the same bits):
// a shape with a tail of 5 past the last chunk of 8 and partial blocks of rows and outputs, then
// the 27B projector's MLP up projection at 448² (784 patches, 1152 -> 4304), timed. Then
// LayerNorm over 27B-wide rows and both GELUs over a sweep of inputs.
void CheckVisionKernels(std::mt19937& gen) {
  std::normal_distribution<float> dist;
  struct Shape {
    int64_t n, in, out;
  };
  for (const Shape sh : {Shape{13, 77, 45}, Shape{784, 1152, 4304}}) {
    std::vector<float> x(sh.n * sh.in), w(sh.out * sh.in), b(sh.out), ref(sh.n * sh.out);
    for (float& v : x) v = dist(gen);
    for (float& v : w) v = 0.05f * dist(gen);
    for (float& v : b) v = dist(gen);
    F32MatMulTileRun(BestCpuIsa(), x.data(), sh.in, w.data(), b.data(), sh.out,
                     {0, sh.n, 0, sh.out}, ref.data());
    char label[96];
    std::snprintf(label, sizeof label, "vision linear %lldx%lld -> %lld, bit-identical",
                  static_cast<long long>(sh.n), static_cast<long long>(sh.in),
                  static_cast<long long>(sh.out));
    if (dry_run) {
      std::printf("cpu side of %s: ready\n", label);
      continue;
    }
    float *dx = ToDevice(x), *dw = ToDevice(w), *db = ToDevice(b), *dy = nullptr;
    CUDA_OK(cudaMalloc(&dy, ref.size() * sizeof(float)));
    CUDA_OK(
        static_cast<cudaError_t>(cuda::F32Linear(dx, sh.n, sh.in, dw, db, sh.out, dy, nullptr)));
    const std::vector<float> got = FromDevice(dy, ref.size());
    const float ms =
        TimeMs([&] { cuda::F32Linear(dx, sh.n, sh.in, dw, db, sh.out, dy, nullptr); }, 10);
    char detail[96];
    std::snprintf(detail, sizeof detail, "%.3f ms, %.0f GFLOP/s", ms,
                  2.0 * sh.n * sh.in * sh.out / (ms * 1e-3) / 1e9);
    Report(label, std::memcmp(got.data(), ref.data(), ref.size() * 4) == 0, detail);
    for (float* d : {dx, dw, db, dy}) cudaFree(d);
  }

  const int64_t rows = 5, d = 1152;
  std::vector<float> x(rows * d), w(d), b(d), ln(rows * d);
  for (float& v : x) v = 3.0f * dist(gen) + 1.0f;
  for (float& v : w) v = dist(gen);
  for (float& v : b) v = dist(gen);
  for (int64_t r = 0; r < rows; ++r) {
    const LayerNormStats stats = LayerNormRowStats(x.data() + r * d, d, 1e-6f);
    for (int64_t k = 0; k < d; ++k) ln[r * d + k] = LayerNormValue(x[r * d + k], stats, w[k], b[k]);
  }
  std::vector<float> sweep(40001), tanh_form(sweep.size()), erf_form(sweep.size());
  for (size_t i = 0; i < sweep.size(); ++i) {
    sweep[i] = -10.0f + 0.0005f * static_cast<float>(i);
    tanh_form[i] = GeluTanh(sweep[i]);
    erf_form[i] = GeluErf(sweep[i]);
  }
  if (dry_run) {
    std::printf("cpu side of the vision LayerNorm and GELUs: ready\n");
    return;
  }
  float *dx = ToDevice(x), *dw = ToDevice(w), *db = ToDevice(b), *dy = nullptr;
  CUDA_OK(cudaMalloc(&dy, ln.size() * sizeof(float)));
  CUDA_OK(static_cast<cudaError_t>(cuda::LayerNormRows(dx, rows, d, dw, db, 1e-6f, dy, nullptr)));
  const std::vector<float> got = FromDevice(dy, ln.size());
  Report("vision LayerNorm 5x1152, bit-identical",
         std::memcmp(got.data(), ln.data(), ln.size() * 4) == 0);
  for (float* p : {dx, dw, db, dy}) cudaFree(p);
  for (const auto& [form, want, label] :
       {std::tuple{cuda::Gelu::kTanh, &tanh_form,
                   "vision GELU (tanh) over [-10, 10], bit-identical"},
        std::tuple{cuda::Gelu::kErf, &erf_form,
                   "vision GELU (erf) over [-10, 10], bit-identical"}}) {
    float* dv = ToDevice(sweep);
    CUDA_OK(static_cast<cudaError_t>(cuda::GeluInPlace(dv, sweep.size(), form, nullptr)));
    const std::vector<float> out = FromDevice(dv, sweep.size());
    Report(label, std::memcmp(out.data(), want->data(), out.size() * 4) == 0);
    cudaFree(dv);
  }
}

}  // namespace
}  // namespace walsh

int main(int argc, char** argv) {
  const char* json_path = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--dry-run") == 0) walsh::dry_run = true;
    if (std::strcmp(argv[i], "--json") == 0 && i + 1 < argc) json_path = argv[++i];
  }
  std::mt19937 gen(1);
  if (walsh::dry_run) {
    walsh::CheckTransformAndQuantization(gen);
    walsh::CheckMatMul(gen, 1);
    walsh::SweepLanesMatVec(gen, 1, json_path);
    walsh::CheckVisionKernels(gen);
    std::printf("dry run: every cpu side built; no CUDA call made\n");
    return 0;
  }
  // A driver older than the runtime, or no device, is a failure of the check, never a skip.
  int driver = 0, runtime = 0, devices = 0;
  const cudaError_t count_error = cudaGetDeviceCount(&devices);
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  std::printf("CUDA driver %d, runtime %d\n", driver, runtime);
  if (count_error != cudaSuccess || devices == 0) {
    std::printf("no CUDA device (%s): the check fails\n",
                count_error != cudaSuccess ? cudaGetErrorString(count_error) : "0 devices");
    return 2;
  }
  if (driver < runtime) {
    std::printf("the driver (%d) is older than the runtime (%d): the check fails\n", driver,
                runtime);
    return 2;
  }
  cudaDeviceProp prop;
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, sm_%d%d, %.0f GiB\n", prop.name, prop.major, prop.minor,
              prop.totalGlobalMem / 1073741824.0);
  walsh::CheckTransformAndQuantization(gen);
  const double copy = walsh::CopyBandwidth();
  std::printf("%-44s %.0f GB/s (read + write)\n", "device-to-device copy bandwidth", copy);
  walsh::CheckMatMul(gen, copy / 2);  // the product only reads: compare with the read half
  walsh::SweepLanesMatVec(gen, copy / 2, json_path);
  walsh::CheckVisionKernels(gen);
  std::printf("%d failure(s)\n", walsh::failures);
  return walsh::failures == 0 ? 0 : 1;
}

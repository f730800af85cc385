// The GPU check, for a machine with an NVIDIA GPU (tests/gpu/run.sh builds and runs it; it
// needs only nvcc, cmake and a compiler). CUDA kernels against the CPU backend on the same
// inputs: the signed FWHT and the int8 quantization bit for bit, the ternary mat-vec within
// float rounding; then the device-to-device copy bandwidth and the mat-vec's speed at the 27B
// shapes. Prints one table; exits non-zero on any mismatch.
#include <cuda_runtime.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/block_types.h"
#include "kernels/cpu/hadamard.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/ternary_matmul.h"
#include "kernels/cuda/ternary_kernels.h"
#include "kernels/float_convert.h"
#include "kernels/ternary_codec_ref.h"

namespace walsh {
namespace {

int failures = 0;

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

std::vector<uint8_t> RandomWeights(uint32_t type, int64_t rows, int64_t cols, std::mt19937& gen) {
  const size_t bb = TernaryBlockBytes(type);
  std::vector<uint8_t> out(rows * cols / 128 * bb);
  uint8_t codes[128];
  for (size_t b = 0; b < out.size() / bb; ++b) {
    for (uint8_t& c : codes) c = gen() % 3;
    if (type == 142) {
      PackBlockPq2_0(codes, FloatToFp16(0.01f + (gen() % 100) * 1e-4f),
                     reinterpret_cast<block_pq2_0*>(out.data()) + b);
    } else {
      PackBlockPtq1_0(codes, FloatToFp16(0.01f + (gen() % 100) * 1e-4f),
                      reinterpret_cast<block_ptq1_0*>(out.data()) + b);
    }
  }
  return out;
}

void CheckTransformAndQuantization(std::mt19937& gen) {
  for (int64_t n : {5120, 6144, 17408}) {
    const int64_t tokens = 3, block = 1024;
    std::vector<float> x(tokens * n);
    std::normal_distribution<float> dist;
    for (float& v : x) v = dist(gen);
    std::vector<int8_t> signs(n);
    for (int8_t& s : signs) s = gen() & 1 ? 1 : -1;
    std::vector<float> ref(x.size());
    for (int64_t t = 0; t < tokens; ++t) {
      SignedFwhtForward(CpuIsa::kScalar, x.data() + t * n, signs.data(), n, block,
                        ref.data() + t * n);
    }
    float* dx = ToDevice(x);
    int8_t* ds = ToDevice(signs);
    float* dy = nullptr;
    CUDA_OK(cudaMalloc(&dy, x.size() * sizeof(float)));
    CUDA_OK(
        static_cast<cudaError_t>(cuda::SignedFwhtForward(dx, ds, tokens, n, block, dy, nullptr)));
    const std::vector<float> got = FromDevice(dy, x.size());
    char label[64];
    std::snprintf(label, sizeof label, "signed FWHT, width %lld, bit-identical",
                  static_cast<long long>(n));
    Report(label, std::memcmp(got.data(), ref.data(), ref.size() * 4) == 0);
    for (Q8Layout layout : {Q8Layout::kNatural, Q8Layout::kPq2Planes}) {
      std::vector<Q8Block128> qref(tokens * n / 128);
      for (int64_t t = 0; t < tokens; ++t)
        QuantizeRowQ8(ref.data() + t * n, n, layout, &qref[t * n / 128]);
      Q8Block128* dq = nullptr;
      CUDA_OK(cudaMalloc(&dq, qref.size() * sizeof(Q8Block128)));
      CUDA_OK(static_cast<cudaError_t>(cuda::QuantizeRowsQ8(dy, tokens, n, layout, dq, nullptr)));
      const std::vector<Q8Block128> qgot = FromDevice(dq, qref.size());
      std::snprintf(label, sizeof label, "int8 quantization, width %lld, %s",
                    static_cast<long long>(n), layout == Q8Layout::kNatural ? "natural" : "planes");
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

void CheckMatVec(std::mt19937& gen, double copy_gbs) {
  for (uint32_t type : {142u, 143u}) {
    for (auto [rows, cols] :
         {std::pair<int64_t, int64_t>{17408, 5120}, {5120, 17408}, {5120, 6144}, {248320, 5120}}) {
      const std::vector<uint8_t> w = RandomWeights(type, rows, cols, gen);
      std::vector<float> x(cols);
      std::normal_distribution<float> dist;
      for (float& v : x) v = dist(gen);
      std::vector<Q8Block128> q(cols / 128);
      QuantizeRowQ8(x.data(), cols, Q8LayoutFor(type), q.data());
      std::vector<float> ref(rows);
      TernaryMatMulQ8(BestCpuIsa(), {type, w.data(), rows, cols}, q.data(), 1, ref.data(), rows, 0,
                      rows);
      uint8_t* dw = ToDevice(w);
      Q8Block128* dq = ToDevice(q);
      float* dy = nullptr;
      CUDA_OK(cudaMalloc(&dy, rows * sizeof(float)));
      CUDA_OK(
          static_cast<cudaError_t>(cuda::TernaryMatVecQ8(type, dw, rows, cols, dq, dy, nullptr)));
      const std::vector<float> got = FromDevice(dy, rows);
      double worst = 0, scale = 0;
      for (int64_t r = 0; r < rows; ++r) {
        worst = std::max(worst, std::fabs(double(got[r]) - ref[r]));
        scale = std::max(scale, std::fabs(double(ref[r])));
      }
      cudaEvent_t start, stop;
      cudaEventCreate(&start);
      cudaEventCreate(&stop);
      cudaEventRecord(start);
      const int iters = 50;
      for (int i = 0; i < iters; ++i) cuda::TernaryMatVecQ8(type, dw, rows, cols, dq, dy, nullptr);
      cudaEventRecord(stop);
      cudaEventSynchronize(stop);
      float ms = 0;
      cudaEventElapsedTime(&ms, start, stop);
      const double gbs = w.size() * iters / (ms * 1e-3) / 1e9;
      char label[96], detail[128];
      std::snprintf(label, sizeof label, "mat-vec %s %lldx%lld vs CPU (rel 1e-5)",
                    type == 142 ? "PQ2_0" : "PTQ1_0", static_cast<long long>(rows),
                    static_cast<long long>(cols));
      std::snprintf(detail, sizeof detail, "max rel err %.2e; %.3f ms, %.0f GB/s = %.0f%% of copy",
                    worst / scale, ms / iters, gbs, 100 * gbs / copy_gbs);
      Report(label, worst <= 1e-5 * scale, detail);
      cudaFree(dw);
      cudaFree(dq);
      cudaFree(dy);
    }
  }
}

}  // namespace
}  // namespace walsh

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device: nothing to check\n");
    return 2;
  }
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  std::printf("device: %s, sm_%d%d, %.0f GiB\n", prop.name, prop.major, prop.minor,
              prop.totalGlobalMem / 1073741824.0);
  std::mt19937 gen(1);
  walsh::CheckTransformAndQuantization(gen);
  const double copy = walsh::CopyBandwidth();
  std::printf("%-44s %.0f GB/s (read + write)\n", "device-to-device copy bandwidth", copy);
  walsh::CheckMatVec(gen, copy / 2);  // the mat-vec only reads: compare with the read half
  std::printf("%d failure(s)\n", walsh::failures);
  return walsh::failures == 0 ? 0 : 1;
}

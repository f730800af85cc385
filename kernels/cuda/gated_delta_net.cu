// Gated DeltaNet (docs/format.md §8.3) with the recurrent state in device memory. The conv runs
// one thread block per sequence (channels in parallel, tokens in order); the delta rule one
// block per (sequence, value head) with a warp per state row, tokens in order — the pieces of
// kernels/token_ops.h's GdnConvStep and GdnHeadStep, its sums in the shared 32 lanes.
#include "kernels/cuda/launch.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/warp_lanes.h"

namespace walsh::cuda {
namespace {

__global__ void ConvKernel(GdnLayerParams p, StepView step, GdnStateView st, const float* qkv,
                           float* u) {
  const int64_t seq = blockIdx.x, conv_dim = p.conv_dim();
  float* conv_state = st.state + step.seq_slot[seq] * st.slot_stride + st.layer_offset;
  const int64_t first = step.seq_first_token[seq], count = step.seq_token_count[seq];
  for (int64_t t = first; t < first + count; ++t) {
    float* ut = u + t * conv_dim;
    const int32_t plane = step.plane_of_token != nullptr ? step.plane_of_token[t] : -1;
    float* plane_state = plane >= 0 ? st.state + plane * st.slot_stride + st.layer_offset : nullptr;
    for (int64_t ch = threadIdx.x; ch < conv_dim; ch += blockDim.x) {
      ut[ch] = GdnConvChannel(p, qkv + t * conv_dim, conv_state, ch);
      // The window of this channel after token t, as the CPU backend copies it.
      for (int64_t k = 0; plane_state != nullptr && k + 1 < p.conv_kernel; ++k) {
        plane_state[k * conv_dim + ch] = conv_state[k * conv_dim + ch];
      }
    }
    __syncthreads();
    for (int64_t h = threadIdx.x; h < 2 * p.n_k; h += blockDim.x) {
      L2NormInPlace(ut + h * p.hd, p.hd, p.eps);
    }
    __syncthreads();
  }
}

// One block per (sequence, value head): warp w takes the state rows j ≡ w (mod warps), its lane
// l the row's sum lane l (the shared 32-lane order), so a row's loads coalesce.
__global__ void RecurrenceKernel(GdnLayerParams p, StepView step, GdnStateView st, const float* u,
                                 const float* z, const float* alpha_beta, float* out) {
  __shared__ float norm_scale;
  const int64_t seq = blockIdx.x, h = blockIdx.y, hd = p.hd;
  const int lane = static_cast<int>(threadIdx.x % kSumLanes);
  const int64_t warp = threadIdx.x / kSumLanes, warps = blockDim.x / kSumLanes;
  const int64_t conv_dim = p.conv_dim(), inner = p.n_v * hd;
  float* S = st.state + step.seq_slot[seq] * st.slot_stride + st.layer_offset + st.conv_floats;
  const int64_t first = step.seq_first_token[seq], count = step.seq_token_count[seq];
  const int64_t kh = p.key_head_of(h);
  const float row_norm = RsqrtF(static_cast<float>(hd));
  for (int64_t t = first; t < first + count; ++t) {
    const float* alpha = alpha_beta + t * 2 * p.n_v;
    float beta, decay;
    GdnHeadGates(p, alpha, alpha + p.n_v, h, &beta, &decay);
    const float* ut = u + t * conv_dim;
    const float* qq = ut + kh * hd;
    const float* kk = ut + p.key_dim() + kh * hd;
    const float* vv = ut + 2 * p.key_dim() + h * hd;
    float* o = out + t * inner + h * hd;
    const int32_t plane = step.plane_of_token != nullptr ? step.plane_of_token[t] : -1;
    float* plane_S =
        plane >= 0 ? st.state + plane * st.slot_stride + st.layer_offset + st.conv_floats : nullptr;
    for (int64_t j = warp; j < hd; j += warps) {
      float* Sj = S + (h * hd + j) * hd;
      const float pred = WarpCombineLanes(GdnDecayPredictLane(Sj, kk, decay, hd, lane));
      const float delta = beta * (vv[j] - pred);
      const float acc = WarpCombineLanes(GdnUpdateOutputLane(Sj, kk, qq, delta, hd, lane));
      if (lane == 0) o[j] = row_norm * acc;
      if (plane_S != nullptr) {
        // Row j after token t, into the plane: the lanes' own elements (as the lane functions
        // wrote them), once the warp is done with the row.
        __syncwarp();
        float* Pj = plane_S + (h * hd + j) * hd;
        for (int64_t i = lane; i < hd; i += kSumLanes) Pj[i] = Sj[i];
      }
    }
    __syncthreads();
    if (warp == 0) {
      const double squares = WarpCombineLanes(SumSquaresLane(o, hd, lane));
      if (lane == 0) norm_scale = RmsScaleFromSum(squares, hd, p.eps);
    }
    __syncthreads();
    for (int64_t j = threadIdx.x; j < hd; j += blockDim.x) {
      o[j] = GdnGateOutput(p, o, norm_scale, z + t * inner, h, j);
    }
    __syncthreads();
  }
}

}  // namespace

int GdnConv(const GdnLayerParams& p, const StepView& step, GdnStateView state, const float* qkv,
            float* u, cudaStream_t stream) {
  if (step.n_seqs == 0) return 0;
  ConvKernel<<<static_cast<unsigned>(step.n_seqs), 256, 0, stream>>>(p, step, state, qkv, u);
  return LastLaunchError();
}

int GdnRecurrence(const GdnLayerParams& p, const StepView& step, GdnStateView state, const float* u,
                  const float* z, const float* alpha_beta, float* out, cudaStream_t stream) {
  if (p.hd < 1) return static_cast<int>(cudaErrorInvalidValue);
  if (step.n_seqs == 0) return 0;
  const dim3 grid(static_cast<unsigned>(step.n_seqs), static_cast<unsigned>(p.n_v));
  // A warp per state row, up to 16 warps.
  const int64_t warps = p.hd < 16 ? p.hd : 16;
  RecurrenceKernel<<<grid, static_cast<unsigned>(warps * kSumLanes), 0, stream>>>(
      p, step, state, u, z, alpha_beta, out);
  return LastLaunchError();
}

}  // namespace walsh::cuda

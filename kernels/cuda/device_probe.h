// Finds CUDA devices and proves the toolchain end to end with one tiny kernel. Returns CUDA
// error codes as ints so callers need no CUDA headers; 0 is success.
#ifndef WALSH_KERNELS_CUDA_DEVICE_PROBE_H_
#define WALSH_KERNELS_CUDA_DEVICE_PROBE_H_

#include <cstdint>

namespace walsh::cuda {

// Number of usable devices in *count (0 when there is no driver or no device: not an error).
int CountDevices(int* count);

// Computes out[i] = a * x[i] + y[i] for n host floats on device `device` (a round trip through
// device memory and one kernel launch). Returns the first CUDA error code, or 0.
int SaxpyOnDevice(int device, float a, const float* x, const float* y, float* out, int64_t n);

// Message for a code returned above.
const char* ErrorString(int code);

}  // namespace walsh::cuda

#endif  // WALSH_KERNELS_CUDA_DEVICE_PROBE_H_

// walsh's own elementary functions, for every backend. The C library's exp, log, sin and cos
// differ between glibc and CUDA's libdevice in the last bit, so a backend that called them
// could never match another bit for bit; these use only IEEE +, -, *, / and sqrt (correctly
// rounded on both) in a fixed order. Accuracy: ExpF and LogF within 2 ulp of the true value
// over their whole range; TanhF and ErfF within 2 ulp (the vision encoder's GELUs); SinCos
// within 1e-15 absolute for |θ| < 2^20 (docs/format.md §8.4).
#ifndef WALSH_KERNELS_NUMERICS_H_
#define WALSH_KERNELS_NUMERICS_H_

#include <math.h>
#include <stdint.h>

#include "kernels/float_convert.h"
#include "kernels/host_device.h"

namespace walsh {

// e^x: x = k·ln2 + r with |r| <= ln2/2 (ln2 in two parts, so k·ln2_hi is exact), a degree-7
// Taylor polynomial of e^r in Horner form, then the exponent k added in two steps so that
// subnormal results round once.
WALSH_HD float ExpF(float x) {
  if (x != x) return x;
  if (x > 88.72283935546875f) return BitsFloat(0x7f800000u);
  if (x < -103.97208404541016f) return 0.0f;
  const float kLog2e = 1.44269502162933349609375f;
  const float kLn2Hi = 0.693145751953125f;       // 16 significant bits
  const float kLn2Lo = 1.4286068203094172e-06f;  // ln 2 - kLn2Hi
  const float kf = x * kLog2e;
  const int k = static_cast<int>(kf < 0.0f ? kf - 0.5f : kf + 0.5f);
  const float fk = static_cast<float>(k);
  const float r = (x - fk * kLn2Hi) - fk * kLn2Lo;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  // p · 2^k, as p · 2^k1 · 2^k2 with both factors normal, so a subnormal result rounds once.
  const int k1 = k > 127 ? 127 : (k < -100 ? k + 100 : k);
  const int k2 = k - k1;
  p = p * BitsFloat(static_cast<uint32_t>(k1 + 127) << 23);
  if (k2 != 0) p = p * BitsFloat(static_cast<uint32_t>(k2 + 127) << 23);
  return p;
}

// ln x for x > 0 (NaN below 0, -inf at 0): x = m·2^e with m in [√½, √2), then
// ln m = 2·atanh(s), s = (m - 1) / (m + 1), |s| <= 0.172, by its odd series to s^11.
WALSH_HD float LogF(float x) {
  if (x != x || x < 0.0f) return BitsFloat(0x7fc00000u);
  if (x == 0.0f) return BitsFloat(0xff800000u);
  if (x == BitsFloat(0x7f800000u)) return x;
  int e = 0;
  if (x < BitsFloat(0x00800000u)) {  // subnormal: scale into the normal range first
    x = x * 16777216.0f;
    e = -24;
  }
  const uint32_t bits = FloatBits(x);
  e += static_cast<int>(bits >> 23) - 127;
  float m = BitsFloat((bits & 0x007fffffu) | 0x3f800000u);
  if (m > 1.41421356237309515f) {
    m = m * 0.5f;
    e += 1;
  }
  const float s = (m - 1.0f) / (m + 1.0f);
  const float s2 = s * s;
  float q = 1.0f / 11.0f;
  q = q * s2 + 1.0f / 9.0f;
  q = q * s2 + 1.0f / 7.0f;
  q = q * s2 + 1.0f / 5.0f;
  q = q * s2 + 1.0f / 3.0f;
  const float ln_m = 2.0f * s + 2.0f * s * (s2 * q);
  const float kLn2Hi = 0.693145751953125f;
  const float kLn2Lo = 1.4286068203094172e-06f;
  const float fe = static_cast<float>(e);
  return (fe * kLn2Hi + ln_m) + fe * kLn2Lo;
}

// ln(1 + y) without losing small y: with u = 1 + y rounded, ln(u) · y / (u - 1) corrects the
// rounding of u (Goldberg's method).
WALSH_HD float Log1pF(float y) {
  const float u = 1.0f + y;
  if (u == 1.0f) return y;
  if (u == BitsFloat(0x7f800000u)) return u;
  return LogF(u) * (y / (u - 1.0f));
}

WALSH_HD float Sigmoid(float x) { return 1.0f / (1.0f + ExpF(-x)); }
WALSH_HD float Silu(float x) { return x / (1.0f + ExpF(-x)); }
// ln(1 + e^x), and x itself above 20 (as ggml).
WALSH_HD float Softplus(float x) { return x > 20.0f ? x : Log1pF(ExpF(x)); }
// 1 / sqrt(x): a correctly rounded sqrt, then a correctly rounded division.
WALSH_HD float RsqrtF(float x) { return 1.0f / sqrtf(x); }

// tanh x, odd: below 0.3 its Taylor series to x^11 (the next term is under 1e-8 of the sum);
// above, (1 - t) / (1 + t) with t = e^(-2|x|), which reaches 1 in float as t vanishes.
WALSH_HD float TanhF(float x) {
  if (x != x) return x;
  const float a = x < 0.0f ? -x : x;
  float r;
  if (a < 0.3f) {
    const float a2 = a * a;
    float p = -1382.0f / 155925.0f;
    p = p * a2 + 62.0f / 2835.0f;
    p = p * a2 - 17.0f / 315.0f;
    p = p * a2 + 2.0f / 15.0f;
    p = p * a2 - 1.0f / 3.0f;
    r = a + a * (a2 * p);
  } else {
    const float t = ExpF(-2.0f * a);
    r = (1.0f - t) / (1.0f + t);
  }
  return x < 0.0f ? -r : r;
}

// erf x, odd: below 0.8 its Taylor series to x^19 (the next term is under 1e-9 of the sum);
// above, 1 - erfc |x| with erfc z = t · e^(-z² + P(t)), t = 1 / (1 + z/2), whose fractional
// error is under 1.2e-7 (Numerical Recipes' erfcc, a Chebyshev fit); ±1 past 4, where erfc
// is under 2e-8 and the difference rounds to 1.
WALSH_HD float ErfF(float x) {
  if (x != x) return x;
  const float a = x < 0.0f ? -x : x;
  float e;
  if (a < 0.8f) {
    const float a2 = a * a;
    float p = -1.0f / 6894720.0f;  // (-1)^n / (n! (2n + 1)) for n = 9 down to 1
    p = p * a2 + 1.0f / 685440.0f;
    p = p * a2 - 1.0f / 75600.0f;
    p = p * a2 + 1.0f / 9360.0f;
    p = p * a2 - 1.0f / 1320.0f;
    p = p * a2 + 1.0f / 216.0f;
    p = p * a2 - 1.0f / 42.0f;
    p = p * a2 + 1.0f / 10.0f;
    p = p * a2 - 1.0f / 3.0f;
    e = 1.1283791670955126f * (a + a * (a2 * p));  // 2 / √π
  } else if (a < 4.0f) {
    const float t = 1.0f / (1.0f + 0.5f * a);
    float p = 0.17087277f;
    p = p * t - 0.82215223f;
    p = p * t + 1.48851587f;
    p = p * t - 1.13520398f;
    p = p * t + 0.27886807f;
    p = p * t - 0.18628806f;
    p = p * t + 0.09678418f;
    p = p * t + 0.37409196f;
    p = p * t + 1.00002368f;
    p = p * t - 1.26551223f;
    e = 1.0f - t * ExpF(p - a * a);
  } else {
    e = 1.0f;
  }
  return x < 0.0f ? -e : e;
}

// sin θ and cos θ in double: θ = k·π/2 + r with π/2 in three 33-bit parts (k·part is exact
// for |k| < 2^20), Taylor polynomials on |r| <= π/4, then the quadrant.
WALSH_HD void SinCos(double theta, double* sin_out, double* cos_out) {
  const double kTwoOverPi = 6.36619772367581382433e-01;
  const double kPio2_1 = 1.57079632673412561417e+00;
  const double kPio2_2 = 6.07710050630396597660e-11;
  const double kPio2_3 = 2.02226624871116645580e-21;
  const double kf = theta * kTwoOverPi;
  const int64_t k = static_cast<int64_t>(kf < 0.0 ? kf - 0.5 : kf + 0.5);
  const double fk = static_cast<double>(k);
  const double r = ((theta - fk * kPio2_1) - fk * kPio2_2) - fk * kPio2_3;
  const double r2 = r * r;
  double s = -1.0 / 355687428096000.0;  // sin: odd terms up to r^15 / 15!
  s = s * r2 + 1.0 / 1307674368000.0;
  s = s * r2 - 1.0 / 6227020800.0;
  s = s * r2 + 1.0 / 39916800.0;
  s = s * r2 - 1.0 / 362880.0;
  s = s * r2 + 1.0 / 5040.0;
  s = s * r2 - 1.0 / 120.0;
  s = s * r2 + 1.0 / 6.0;
  const double sin_r = r - r * (r2 * s);
  double c = 1.0 / 6402373705728000.0;  // cos: even terms up to r^18/18!
  c = c * r2 - 1.0 / 20922789888000.0;
  c = c * r2 + 1.0 / 87178291200.0;
  c = c * r2 - 1.0 / 479001600.0;
  c = c * r2 + 1.0 / 3628800.0;
  c = c * r2 - 1.0 / 40320.0;
  c = c * r2 + 1.0 / 720.0;
  c = c * r2 - 1.0 / 24.0;
  c = c * r2 + 0.5;
  const double cos_r = 1.0 - r2 * c;
  switch (static_cast<int>(k & 3)) {
    case 0:
      *sin_out = sin_r;
      *cos_out = cos_r;
      break;
    case 1:
      *sin_out = cos_r;
      *cos_out = -sin_r;
      break;
    case 2:
      *sin_out = -sin_r;
      *cos_out = -cos_r;
      break;
    default:
      *sin_out = -cos_r;
      *cos_out = sin_r;
      break;
  }
}

}  // namespace walsh

#endif  // WALSH_KERNELS_NUMERICS_H_

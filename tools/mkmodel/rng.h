// A small deterministic generator (splitmix64) so synthetic models are byte-identical across
// runs and standard-library versions.
#ifndef WALSH_TOOLS_MKMODEL_RNG_H_
#define WALSH_TOOLS_MKMODEL_RNG_H_

#include <cmath>
#include <cstdint>
#include <string_view>

namespace walsh {

inline uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

inline uint64_t HashName(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(Mix64(seed)) {}

  uint64_t Next() { return Mix64(state_ += 0x9e3779b97f4a7c15ull); }
  // Uniform in (0, 1).
  double Uniform() { return (static_cast<double>(Next() >> 11) + 0.5) * 0x1.0p-53; }
  double Normal() {
    const double u = Uniform(), v = Uniform();
    return std::sqrt(-2.0 * std::log(u)) * std::cos(6.283185307179586 * v);
  }

 private:
  uint64_t state_;
};

}  // namespace walsh

#endif  // WALSH_TOOLS_MKMODEL_RNG_H_

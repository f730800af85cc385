// A JSON text's shape, checked with a SAX pass before any DOM is built: how deeply it nests and
// how many values it holds. nlohmann::json copies and prints recursively (a million levels
// would overflow a thread's stack), and a DOM costs far more than its text (an 8 MiB array of
// empty objects takes ~300 MB), so untrusted texts are measured first.
#ifndef WALSH_COMMON_JSON_SHAPE_H_
#define WALSH_COMMON_JSON_SHAPE_H_

#include <cstdint>
#include <string>

namespace walsh {

inline constexpr int kMaxJsonDepth = 64;            // arrays and objects inside each other
inline constexpr int64_t kMaxJsonValues = 100'000;  // values of any kind, keys not counted

enum class JsonShape { kOk, kInvalid, kTooDeep, kTooManyValues };

JsonShape CheckJsonShape(const std::string& text, int max_depth = kMaxJsonDepth,
                         int64_t max_values = kMaxJsonValues);

}  // namespace walsh

#endif  // WALSH_COMMON_JSON_SHAPE_H_

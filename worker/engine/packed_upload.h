// Several host arrays laid end to end in one byte image, each at a 16-byte-aligned offset, so a
// step's inputs reach the device in one copy from pinned memory (the CUDA backend's BeginStep)
// instead of one pageable copy, and one stream synchronization, per array. Every array, an empty
// one too, gets at least one 16-byte slot of its own, so each offset is a valid address there.
#ifndef WALSH_WORKER_ENGINE_PACKED_UPLOAD_H_
#define WALSH_WORKER_ENGINE_PACKED_UPLOAD_H_

#include <cstdint>
#include <cstring>
#include <vector>

namespace walsh {

class PackedUpload {
 public:
  static constexpr int64_t kAlignment = 16;

  void Clear() { bytes_.clear(); }

  // Appends count values; returns their offset in the image.
  template <typename T>
  int64_t Add(const T* values, int64_t count) {
    const int64_t offset = static_cast<int64_t>(bytes_.size());
    const int64_t n = count * static_cast<int64_t>(sizeof(T));
    const int64_t slot = ((n > 0 ? n : 1) + kAlignment - 1) / kAlignment * kAlignment;
    bytes_.resize(offset + slot, 0);
    if (n > 0) std::memcpy(bytes_.data() + offset, values, static_cast<size_t>(n));
    return offset;
  }
  template <typename T>
  int64_t Add(const std::vector<T>& values) {
    return Add(values.data(), static_cast<int64_t>(values.size()));
  }

  const uint8_t* data() const { return bytes_.data(); }
  int64_t bytes() const { return static_cast<int64_t>(bytes_.size()); }

 private:
  std::vector<uint8_t> bytes_;
};

}  // namespace walsh

#endif  // WALSH_WORKER_ENGINE_PACKED_UPLOAD_H_

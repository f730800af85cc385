// SHA-256 digests as lowercase hex, used to pin conformance data and fingerprints.
#ifndef WALSH_COMMON_SHA256_H_
#define WALSH_COMMON_SHA256_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace walsh {

// Incremental SHA-256 (OpenSSL's EVP underneath).
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void Update(const void* data, size_t size);
  // Returns the digest as 64 lowercase hex characters; the object is spent afterwards.
  std::string HexDigest();

 private:
  struct Ctx;
  std::unique_ptr<Ctx> ctx_;
};

std::string Sha256Hex(const void* data, size_t size);

}  // namespace walsh

#endif  // WALSH_COMMON_SHA256_H_

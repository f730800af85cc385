// A synthetic model preset written to a temporary GGUF file, and engines built on it with any
// options: the fixture of the engine-level tests.
#ifndef WALSH_TESTS_UTIL_SYNTHETIC_ENGINE_H_
#define WALSH_TESTS_UTIL_SYNTHETIC_ENGINE_H_

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/util/test_util.h"
#include "tools/mkmodel/synthetic_model.h"
#include "worker/engine/solo_runner.h"

namespace walsh::testing {

class SyntheticEngine {
 public:
  explicit SyntheticEngine(const std::string& preset) {
    auto model = SyntheticModel::Create({.preset = preset, .seed = 8});
    EXPECT_TRUE(model.ok());
    config_ = (*model)->preset().config;
    path_ = dir_.File("m.gguf");
    EXPECT_TRUE((*model)->WritePacked(path_).ok());
  }

  // The model loaded and bound, as an engine (or a follower rank) takes it.
  std::unique_ptr<Model> Load() const {
    auto file = LoadModelFile(path_);
    EXPECT_TRUE(file.ok());
    auto bound = Model::Bind(std::move(*file));
    EXPECT_TRUE(bound.ok());
    return std::move(*bound);
  }

  std::unique_ptr<SoloRunner> Make(EngineOptions opts = {}, CacheOptions caches = {}) {
    auto engine = SoloRunner::Create(Load(), opts, caches);
    EXPECT_TRUE(engine.ok()) << engine.status();
    return std::move(*engine);
  }

  // n token ids drawn uniformly from the vocabulary.
  std::vector<int32_t> Tokens(int n, uint32_t seed) const {
    std::mt19937 gen(seed);
    std::vector<int32_t> ids(n);
    for (int32_t& t : ids) t = static_cast<int32_t>(gen() % config_.vocab_size);
    return ids;
  }

  int64_t vocab() const { return config_.vocab_size; }
  const Qwen35Config& config() const { return config_; }

 private:
  TempDir dir_;
  std::string path_;
  Qwen35Config config_;
};

}  // namespace walsh::testing

#endif  // WALSH_TESTS_UTIL_SYNTHETIC_ENGINE_H_

// The seam between the graph and a device: MakeBackendGroup picks kernels, ranks and the
// communicator (refusing what a build or device cannot do, by name), and an activation view
// handed out earlier in a step stays valid when its slot grows later in the same step.
#include "worker/engine/backend_group.h"

#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "tests/util/test_util.h"
#include "tools/mkmodel/synthetic_model.h"

namespace walsh {
namespace {

class BackendGroupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto synthetic = SyntheticModel::Create({.preset = "tiny", .seed = 3});
    ASSERT_TRUE(synthetic.ok()) << synthetic.status();
    const std::string path = dir_.File("m.gguf");
    ASSERT_TRUE((*synthetic)->WritePacked(path).ok());
    auto file = LoadModelFile(path);
    ASSERT_TRUE(file.ok()) << file.status();
    auto bound = Model::Bind(std::move(*file));
    ASSERT_TRUE(bound.ok()) << bound.status();
    model_ = std::move(*bound);
  }

  testing::TempDir dir_;
  std::unique_ptr<Model> model_;
};

TEST_F(BackendGroupTest, OneCpuRankHasNoCommunicator) {
  EngineOptions options;
  options.isa = CpuIsa::kScalar;
  auto group = MakeBackendGroup(*model_, options);
  ASSERT_TRUE(group.ok()) << group.status();
  EXPECT_EQ(group->size(), 1);
  EXPECT_EQ(group->communicator(), nullptr);
  EXPECT_EQ(group->kernels(), "scalar");
  EXPECT_FALSE(group->broken());
  int ran = 0;
  EXPECT_TRUE(group
                  ->Run([&](int rank) {
                    ran += rank + 1;
                    return absl::OkStatus();
                  })
                  .ok());
  EXPECT_EQ(ran, 1);
}

TEST_F(BackendGroupTest, CpuRanksShareOneCommunicatorAndRunTogether) {
  EngineOptions options;
  options.tp = 2;
  auto group = MakeBackendGroup(*model_, options);
  ASSERT_TRUE(group.ok()) << group.status();
  EXPECT_EQ(group->size(), 2);
  ASSERT_NE(group->communicator(), nullptr);
  EXPECT_EQ(group->communicator()->size(), 2);
  // Both ranks meet in a barrier: they can only pass it if they run at once.
  Communicator* comm = group->communicator();
  EXPECT_TRUE(
      group->Run([&](int rank) { return comm->Barrier(rank, std::chrono::milliseconds(5000)); })
          .ok());
}

TEST_F(BackendGroupTest, RefusesWhatItCannotDoByName) {
  EngineOptions cuda_tp;
  cuda_tp.device = Device::kCuda;
  cuda_tp.tp = 2;
  auto group = MakeBackendGroup(*model_, cuda_tp);
  ASSERT_FALSE(group.ok());
  EXPECT_NE(group.status().message().find("--tp must be 1 with --device cuda"), std::string::npos)
      << group.status();

  EngineOptions fp32_cuda;
  fp32_cuda.device = Device::kCuda;
  fp32_cuda.quantize_activations = false;
  group = MakeBackendGroup(*model_, fp32_cuda);
  ASSERT_FALSE(group.ok());
  EXPECT_NE(group.status().message().find("--no-activation-quant"), std::string::npos)
      << group.status();
}

TEST_F(BackendGroupTest, AViewOutlivesItsSlotGrowingWithinTheStep) {
  EngineOptions options;
  auto group = MakeBackendGroup(*model_, options);
  ASSERT_TRUE(group.ok()) << group.status();
  Backend& backend = group->backend(0);
  ASSERT_TRUE(backend.BeginStep({}).ok());
  auto small = backend.Activation(3, 1, 4);
  ASSERT_TRUE(small.ok()) << small.status();
  const float values[4] = {1.5f, -2.0f, 3.25f, 0.0f};
  std::memcpy(small->f32(), values, sizeof values);
  auto large = backend.Activation(3, 64, 4096);  // the slot outgrows its memory
  ASSERT_TRUE(large.ok()) << large.status();
  EXPECT_NE(large->data, small->data);
  std::vector<float> read(4);
  ASSERT_TRUE(backend.ReadToHost(*small, read.data()).ok());  // ASan: no use after free
  EXPECT_EQ(0, std::memcmp(read.data(), values, sizeof values));
  ASSERT_TRUE(backend.BeginStep({}).ok());  // the outgrown memory goes now
}

TEST_F(BackendGroupTest, ActivationViewsNameTheirTypeAndRefuseBadShapes) {
  EngineOptions options;
  auto group = MakeBackendGroup(*model_, options);
  ASSERT_TRUE(group.ok()) << group.status();
  Backend& backend = group->backend(0);
  auto q8 = backend.Activation(0, 2, 256, DType::kQ8, Q8Layout::kPq2Planes);
  ASSERT_TRUE(q8.ok()) << q8.status();
  EXPECT_EQ(q8->dtype, DType::kQ8);
  EXPECT_EQ(q8->layout, Q8Layout::kPq2Planes);
  EXPECT_FALSE(backend.Activation(0, 2, 200, DType::kQ8).ok());  // not whole 128-blocks
  EXPECT_FALSE(backend.Activation(kActivationSlots, 1, 1).ok());
  EXPECT_FALSE(backend.Activation(-1, 1, 1).ok());
}

}  // namespace
}  // namespace walsh

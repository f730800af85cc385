// Images through walsh.v1 on a real worker (--mmproj, gRPC on loopback): a prompt piece or chat
// part renders as its placeholder, whose pad tokens the encoder's rows replace. The served tokens
// and logprobs equal the engine driven directly with the same rows; a second image of the same
// size is not served from the first one's cached pages; a Resume carries the image and continues
// exactly; and every way an image request can be wrong is refused naming its field.
#include <png.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/test_util.h"
#include "tools/mkmodel/synthetic_mmproj.h"
#include "tools/mkmodel/synthetic_model.h"
#include "walsh/v1/generator.grpc.pb.h"
#include "worker/engine/image_prompt.h"
#include "worker/engine/solo_runner.h"
#include "worker/model/gguf_file.h"
#include "worker/model/tokenizer.h"
#include "worker/server/worker_server.h"
#include "worker/vision/prompt_images.h"

namespace walsh {
namespace {

using ::testing::HasSubstr;

// A width × height RGB PNG of a pattern drawn from `seed`.
std::string Png(int width, int height, uint32_t seed) {
  std::vector<uint8_t> rgb(static_cast<size_t>(width) * height * 3);
  uint32_t x = seed * 2654435761u + 1;
  for (uint8_t& v : rgb) {
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    v = static_cast<uint8_t>(x);
  }
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  image.width = width;
  image.height = height;
  image.format = PNG_FORMAT_RGB;
  png_alloc_size_t size = 0;
  EXPECT_TRUE(png_image_write_to_memory(&image, nullptr, &size, 0, rgb.data(), 0, nullptr));
  std::string out(size, '\0');
  EXPECT_TRUE(png_image_write_to_memory(&image, out.data(), &size, 0, rgb.data(), 0, nullptr));
  out.resize(size);
  return out;
}

struct Served {
  grpc::Status status;
  std::vector<int32_t> prompt_ids, ids;
  std::vector<float> logprobs;
};

Served ReadServed(grpc::ClientReaderInterface<v1::GenerateResponse>& reader) {
  Served s;
  v1::GenerateResponse r;
  while (reader.Read(&r)) {
    if (r.has_started())
      s.prompt_ids.assign(r.started().prompt_ids().begin(), r.started().prompt_ids().end());
    for (const auto& t : r.tokens().tokens()) {
      s.ids.push_back(t.id());
      s.logprobs.push_back(t.logprob());
    }
  }
  s.status = reader.Finish();
  return s;
}

// Text, an image, more text: greedy, 6 tokens.
v1::GenerateRequest ImageRequest(const std::string& image) {
  v1::GenerateRequest r;
  auto* pieces = r.mutable_pieces();
  pieces->add_pieces()->set_text("Look: ");
  pieces->add_pieces()->set_image(image);
  pieces->add_pieces()->set_text(" What is it?");
  r.mutable_sampling()->set_temperature(0.0f);
  r.mutable_stopping()->set_max_tokens(6);
  r.mutable_stopping()->set_ignore_eos(true);
  r.set_return_prompt_ids(true);
  return r;
}

class ImageRequests : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir;
    auto model = SyntheticModel::Create({.preset = "tiny"});
    ASSERT_TRUE(model.ok());
    ASSERT_TRUE((*model)->WritePacked(dir_->File("tiny.gguf")).ok());
    hidden_ = (*model)->preset().config.embedding_length;
    ASSERT_TRUE(
        WriteSyntheticMmproj({.text_embedding_length = hidden_}, dir_->File("v.mmproj")).ok());
  }
  static void TearDownTestSuite() { delete dir_; }

  static WorkerServer::Options Options(bool vision) {
    WorkerServer::Options o;
    o.model = dir_->File("tiny.gguf");
    o.listen = "127.0.0.1:0";
    o.metrics_listen = "127.0.0.1:0";
    o.kv_cache_mb = 16;
    o.state_mb = 16;
    o.prefix_cache_min_tokens = 16;
    o.prefix_cache_snapshot_interval = 16;
    if (vision) o.mmproj = dir_->File("v.mmproj");
    return o;
  }

  static std::unique_ptr<v1::Generator::Stub> Stub(WorkerServer& w) {
    return v1::Generator::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(w.grpc_port()),
                                                      grpc::InsecureChannelCredentials()));
  }

  static Served Generate(WorkerServer& w, const v1::GenerateRequest& req) {
    grpc::ClientContext ctx;
    auto reader = Stub(w)->Generate(&ctx, req);
    return ReadServed(*reader);
  }

  // The same prompt through the engine directly: the image prepared, found in the prompt ids and
  // encoded with the product's functions, then greedy decoding by argmax, with logprobs.
  static Served Direct(const std::vector<int32_t>& prompt_ids, const std::string& image, int n) {
    Served out;
    auto vision_model = VisionModel::Load(dir_->File("v.mmproj"), hidden_);
    EXPECT_TRUE(vision_model.ok());
    auto file_for_tokens = GgufFile::Open(dir_->File("tiny.gguf"));
    auto tokenizer = Tokenizer::FromGguf(**file_for_tokens);
    auto input = VisionInputFor(**vision_model, **tokenizer, {}, 4, 1);
    EXPECT_TRUE(input.ok()) << input.status();
    const VisionInput& vision = *input;
    auto prepared = PrepareImage(vision, "image", image);
    EXPECT_TRUE(prepared.ok()) << prepared.status();
    auto spans = LocateImages(prompt_ids, vision, {*prepared}, "prompt");
    EXPECT_TRUE(spans.ok()) << spans.status();
    auto images = EncodeImages(vision, {*prepared}, *spans);
    EXPECT_TRUE(images.ok());

    auto file = LoadModelFile(dir_->File("tiny.gguf"));
    auto bound = Model::Bind(std::move(*file));
    auto engine = SoloRunner::Create(std::move(*bound), {}, {.prefix_caching = false});
    EXPECT_TRUE(engine.ok());
    const SequenceId seq = *(*engine)->AddSequence();
    std::vector<int32_t> tokens = KeyImageTokens(prompt_ids, *images);
    int64_t fed = 0;
    for (int step = 0; step < n; ++step) {
      SequenceInput in{seq, std::vector<int32_t>(tokens.begin() + fed, tokens.end())};
      AttachImageInputs(*images, fed, in);
      auto result = (*engine)->Forward({in});
      EXPECT_TRUE(result.ok()) << result.status();
      const float* l = result->RowLogits(0);
      int32_t best = 0;
      double max = l[0], sum = 0;
      for (int64_t v = 1; v < result->vocab; ++v) {
        if (l[v] > l[best]) best = static_cast<int32_t>(v), max = l[v];
      }
      for (int64_t v = 0; v < result->vocab; ++v) sum += std::exp(double{l[v]} - max);
      out.ids.push_back(best);
      out.logprobs.push_back(static_cast<float>(-std::log(sum)));
      fed = static_cast<int64_t>(tokens.size());
      tokens.push_back(best);
    }
    return out;
  }

  static int32_t Token(const char* text) {
    auto file = GgufFile::Open(dir_->File("tiny.gguf"));
    EXPECT_TRUE(file.ok());
    auto tokenizer = Tokenizer::FromGguf(**file);
    EXPECT_TRUE(tokenizer.ok());
    return (*tokenizer)->FindToken(text);
  }

  static testing::TempDir* dir_;
  static int64_t hidden_;
};

testing::TempDir* ImageRequests::dir_ = nullptr;
int64_t ImageRequests::hidden_ = 0;

TEST_F(ImageRequests, AreServedAsTheEngineComputesThemAndCachedByTheirContent) {
  auto worker = WorkerServer::Start(Options(true));
  ASSERT_TRUE(worker.ok()) << worker.status();
  const std::string a = Png(70, 50, 1), b = Png(70, 50, 2);
  // A, then B of the same size (the same placeholder), then A again from the cache.
  const Served first = Generate(**worker, ImageRequest(a));
  const Served other = Generate(**worker, ImageRequest(b));
  const Served again = Generate(**worker, ImageRequest(a));
  for (const Served* s : {&first, &other, &again}) {
    ASSERT_TRUE(s->status.ok()) << s->status.error_message();
    ASSERT_EQ(s->ids.size(), 6u);
  }
  ASSERT_EQ(first.prompt_ids, other.prompt_ids);
  const int32_t pad = Token("<|image_pad|>");
  const int64_t pads = std::count(first.prompt_ids.begin(), first.prompt_ids.end(), pad);
  EXPECT_GE(pads, 8) << "at least the processor's minimum of 8 rows";

  const Served want_a = Direct(first.prompt_ids, a, 6), want_b = Direct(other.prompt_ids, b, 6);
  EXPECT_EQ(first.ids, want_a.ids);
  EXPECT_EQ(other.ids, want_b.ids);
  EXPECT_EQ(again.ids, want_a.ids);
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_NEAR(first.logprobs[i], want_a.logprobs[i], 1e-5) << i;
    EXPECT_NEAR(other.logprobs[i], want_b.logprobs[i], 1e-5) << i;
    EXPECT_EQ(again.logprobs[i], first.logprobs[i]) << i;
  }
  EXPECT_NE(first.logprobs[0], other.logprobs[0]) << "the image must reach the output";

  // A chat message's parts render the same placeholder in a user turn.
  v1::GenerateRequest chat;
  auto* m = chat.mutable_chat()->add_messages();
  m->set_role("user");
  m->add_parts()->set_text("Look: ");
  m->add_parts()->set_image(a);
  chat.mutable_stopping()->set_max_tokens(2);
  chat.set_return_prompt_ids(true);
  const Served chatted = Generate(**worker, chat);
  ASSERT_TRUE(chatted.status.ok()) << chatted.status.error_message();
  EXPECT_EQ(std::count(chatted.prompt_ids.begin(), chatted.prompt_ids.end(), pad), pads);
}

TEST_F(ImageRequests, AResumeCarriesTheImageAndContinuesExactly) {
  auto worker = WorkerServer::Start(Options(true));
  ASSERT_TRUE(worker.ok()) << worker.status();
  const std::string a = Png(40, 90, 3);
  const Served whole = Generate(**worker, ImageRequest(a));
  ASSERT_TRUE(whole.status.ok()) << whole.status.error_message();
  auto other = WorkerServer::Start(Options(true));  // another worker picks it up
  ASSERT_TRUE(other.ok());
  auto stub = v1::Worker::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string((*other)->grpc_port()), grpc::InsecureChannelCredentials()));
  v1::ResumeRequest resume;
  *resume.mutable_request() = ImageRequest(a);
  resume.mutable_prompt_ids()->Add(whole.prompt_ids.begin(), whole.prompt_ids.end());
  resume.mutable_emitted_ids()->Add(whole.ids.begin(), whole.ids.begin() + 2);
  grpc::ClientContext ctx;
  auto reader = stub->Resume(&ctx, resume);
  const Served rest = ReadServed(*reader);
  ASSERT_TRUE(rest.status.ok()) << rest.status.error_message();
  EXPECT_EQ(rest.ids, std::vector<int32_t>(whole.ids.begin() + 2, whole.ids.end()));

  // prompt_ids whose placeholder is not the image's: refused, naming the field.
  std::vector<int32_t> short_run = whole.prompt_ids;
  short_run.erase(std::find(short_run.begin(), short_run.end(), Token("<|image_pad|>")));
  resume.mutable_prompt_ids()->Clear();
  resume.mutable_prompt_ids()->Add(short_run.begin(), short_run.end());
  grpc::ClientContext ctx2;
  auto refused = stub->Resume(&ctx2, resume);
  const Served bad = ReadServed(*refused);
  EXPECT_EQ(bad.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(bad.status.error_message(),
              HasSubstr("prompt_ids: image 0 (pieces.pieces[1].image) has"));
}

TEST_F(ImageRequests, AreRefusedNamingTheField) {
  const std::string a = Png(64, 64, 4);
  const auto refusal = [](WorkerServer& w, const v1::GenerateRequest& req) {
    const Served s = Generate(w, req);
    EXPECT_EQ(s.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << s.status.error_message();
    return s.status.error_message();
  };
  {
    auto text_only = WorkerServer::Start(Options(false));
    ASSERT_TRUE(text_only.ok());
    EXPECT_EQ(refusal(**text_only, ImageRequest(a)),
              "pieces.pieces[1].image: this worker takes no images (it has no vision projector: "
              "--mmproj)");
  }
  WorkerServer::Options o = Options(true);
  o.max_images_per_request = 1;
  auto worker = WorkerServer::Start(o);
  ASSERT_TRUE(worker.ok());
  WorkerServer& w = **worker;
  EXPECT_THAT(refusal(w, ImageRequest(a.substr(0, a.size() / 2))),
              HasSubstr("pieces.pieces[1].image: "));
  EXPECT_THAT(refusal(w, ImageRequest("GIF89a not an image we take")),
              HasSubstr("pieces.pieces[1].image: "));
  v1::GenerateRequest two = ImageRequest(a);
  two.mutable_pieces()->add_pieces()->set_image(a);
  EXPECT_EQ(refusal(w, two),
            "pieces.pieces[3].image: 2 images in one request; the most is 1 "
            "(--max-images-per-request)");
  v1::GenerateRequest both = ImageRequest(a);
  both.mutable_pieces()->mutable_pieces(1)->set_text("and text");
  EXPECT_EQ(refusal(w, both), "pieces.pieces[1]: an image piece has no text and is not markup");
  v1::GenerateRequest typed;
  typed.set_text("<|vision_start|><|image_pad|><|vision_end|> typed, not placed");
  EXPECT_THAT(refusal(w, typed), HasSubstr("prompt: holds <|image_pad|> tokens"));
  v1::GenerateRequest assistant;
  auto* m = assistant.mutable_chat()->add_messages();
  m->set_role("assistant");
  m->add_parts()->set_image(a);
  EXPECT_THAT(refusal(w, assistant), HasSubstr("only a user message has parts, not assistant"));
  v1::GenerateRequest mixed;
  auto* u = mixed.mutable_chat()->add_messages();
  u->set_role("user");
  u->set_content("text");
  u->add_parts()->set_image(a);
  EXPECT_EQ(refusal(w, mixed), "chat.messages[0].content: cannot go with parts");
}

// What a request's images cost is read from their headers before any is decoded: images whose
// files declare too many pixels together, or more tokens than the context holds, are refused
// naming the image that crossed the line, though none would decode (no pixel data follows).
TEST_F(ImageRequests, CostsAreKnownFromTheHeadersBeforeDecoding) {
  // A PNG's signature and its IHDR chunk (8 + 25 bytes), declaring width x height.
  const auto header_only = [](uint32_t width, uint32_t height) {
    std::string png = Png(8, 8, 1).substr(0, 33);
    for (int i = 0; i < 4; ++i) {
      png[16 + i] = static_cast<char>(width >> (24 - 8 * i));
      png[20 + i] = static_cast<char>(height >> (24 - 8 * i));
    }
    return png;
  };
  const auto refusal = [](WorkerServer& w, const v1::GenerateRequest& req) {
    const Served s = Generate(w, req);
    EXPECT_EQ(s.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << s.status.error_message();
    return s.status.error_message();
  };
  {
    WorkerServer::Options o = Options(true);
    o.max_request_image_pixels = 100'000;
    auto worker = WorkerServer::Start(o);
    ASSERT_TRUE(worker.ok()) << worker.status();
    v1::GenerateRequest two = ImageRequest(header_only(320, 240));
    two.mutable_pieces()->add_pieces()->set_image(header_only(320, 240));
    EXPECT_EQ(refusal(**worker, two),
              "pieces.pieces[3].image: the request's images hold 153600 pixels up to this one, "
              "over the limit of 100000 (--max-request-image-pixels)");
    // Within every bound, the decoder has the last word: there is nothing to decode.
    EXPECT_THAT(refusal(**worker, ImageRequest(header_only(64, 64))),
                HasSubstr("pieces.pieces[1].image: the PNG is corrupt"));
  }
  WorkerServer::Options o = Options(true);
  o.max_context = 512;
  auto worker = WorkerServer::Start(o);
  ASSERT_TRUE(worker.ok()) << worker.status();
  EXPECT_THAT(refusal(**worker, ImageRequest(header_only(1000, 1000))),
              HasSubstr("pieces.pieces[1].image: the request's images take 963 tokens up to this "
                        "one, over the context limit of 512 tokens"));
}

// walsh-run --mmproj --image, the process a user runs: the worker's tokens for the same prompt.
TEST_F(ImageRequests, WalshRunGivesTheWorkersTokens) {
  using testing::RunProcess;
  auto worker = WorkerServer::Start(Options(true));
  ASSERT_TRUE(worker.ok()) << worker.status();
  const std::string a = Png(70, 50, 1);
  testing::WriteFileOrDie(dir_->File("a.png"), a);
  const Served served = Generate(**worker, ImageRequest(a));
  ASSERT_TRUE(served.status.ok()) << served.status.error_message();
  const std::vector<std::string> run = {WALSH_RUN_BIN,
                                        "--model",
                                        dir_->File("tiny.gguf"),
                                        "--mmproj",
                                        dir_->File("v.mmproj"),
                                        "--image",
                                        dir_->File("a.png"),
                                        "--prompt",
                                        "Look: <__image__> What is it?",
                                        "--max-tokens",
                                        "6",
                                        "--ignore-eos",
                                        "--output",
                                        "ids"};
  const auto ran = RunProcess(run);
  ASSERT_EQ(ran.exit_code, 0) << ran.err;
  std::vector<int32_t> ids;
  for (absl::string_view id : absl::StrSplit(absl::StripAsciiWhitespace(ran.out), ',')) {
    ids.push_back(std::stoi(std::string(id)));
  }
  EXPECT_EQ(ids, served.ids);
  EXPECT_NE(ran.err.find(absl::StrCat("prompt ", served.prompt_ids.size(), " tokens")),
            std::string::npos)
      << ran.err;

  // Refusals name what they refuse.
  const auto no_projector = RunProcess({WALSH_RUN_BIN, "--model", dir_->File("tiny.gguf"),
                                        "--image", dir_->File("a.png"), "--prompt", "x"});
  EXPECT_EQ(no_projector.exit_code, 2);
  EXPECT_THAT(no_projector.err, HasSubstr("--image needs --mmproj and --prompt"));
  testing::WriteFileOrDie(dir_->File("cut.png"), a.substr(0, a.size() / 2));
  std::vector<std::string> cut = run;
  cut[6] = dir_->File("cut.png");
  const auto corrupt = RunProcess(cut);
  EXPECT_EQ(corrupt.exit_code, 2);
  EXPECT_THAT(corrupt.err, HasSubstr("--image " + dir_->File("cut.png") + ": "));
  std::vector<std::string> two_markers = run;
  two_markers[8] = "<__image__><__image__>";
  const auto markers = RunProcess(two_markers);
  EXPECT_EQ(markers.exit_code, 2);
  EXPECT_THAT(markers.err, HasSubstr("--prompt has 2 <__image__> markers for 1 images"));
}

TEST(ImageRequestOptions, MmprojNeedsTheCpuBackend) {
  WorkerServer::Options o;
  o.model = "m.gguf";
  o.mmproj = "v.mmproj";
  o.device = "cuda";
  EXPECT_THAT(std::string(o.Validate().message()), HasSubstr("--mmproj needs --device cpu"));
  o.device = "cpu";
  o.max_images_per_request = 0;
  EXPECT_THAT(std::string(o.Validate().message()), HasSubstr("--max-images-per-request"));
}

}  // namespace
}  // namespace walsh

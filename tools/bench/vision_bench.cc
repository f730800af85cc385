#include "tools/bench/vision_bench.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/cli_flags.h"
#include "nlohmann/json.hpp"
#include "tools/bench/report.h"
#include "tools/bench/stopwatch.h"
#include "tools/mkmodel/synthetic_mmproj.h"
#include "worker/vision/encode_cost.h"
#include "worker/vision/vision_model.h"

namespace walsh {
namespace {

double MaxResidentGb() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) * 1024 / 1e9;
}

}  // namespace

int VisionBenchMain(int argc, char** argv) {
  std::string device = "cpu", sides_flag = "448,1024", preset = "27b", json_path;
  int64_t threads = 0, repeat = 1;
  int64_t cuda_device = 0, text_width = 5120;
  FlagSet flags(
      "walsh-bench vision [--device cpu|cuda] [--sides 448,1024] [--preset 27b] [--threads N] "
      "[--repeat N] [--json FILE]");
  flags.String("device", &device, "cpu or cuda");
  flags.Int("cuda-device", &cuda_device, "with --device cuda");
  flags.String("sides", &sides_flag, "square images' sides in pixels (multiples of 32)");
  flags.String("preset", &preset, "the synthetic projector: tiny, small or 27b");
  flags.Int("text-width", &text_width, "the merger's output width (the text model's hidden size)");
  flags.Int("threads", &threads, "CPU threads (--device cpu; 0: one per core)");
  flags.Int("repeat", &repeat, "timed encodes per side (the median is reported)");
  flags.String("json", &json_path, "also write the results as JSON to this file");
  if (absl::Status s = flags.Parse(argc, argv); !s.ok()) {
    return Fail("walsh-bench vision", 2, std::string(s.message()) + "\n" + flags.Help());
  }
  if (flags.help_requested()) {
    std::fputs(flags.Help().c_str(), stdout);
    return 0;
  }
  if (device != "cpu" && device != "cuda")
    return Fail("walsh-bench vision", 2, "--device must be cpu or cuda");
  for (const auto& check :
       {FlagAtLeast("--threads", threads, 0), FlagAtLeast("--repeat", repeat, 1),
        FlagAtLeast("--text-width", text_width, 1), FlagAtLeast("--cuda-device", cuda_device, 0)}) {
    if (!check.ok()) return Fail("walsh-bench vision", 2, std::string(check.message()));
  }
  std::vector<int64_t> sides;
  for (absl::string_view s : absl::StrSplit(sides_flag, ',')) {
    int64_t v;
    if (!absl::SimpleAtoi(s, &v) || v < 32 || v % 32 != 0) {
      return Fail("walsh-bench vision", 2,
                  "--sides: \"" + std::string(s) + "\" is not a positive multiple of 32");
    }
    sides.push_back(v);
  }

  const std::string path = "/tmp/walsh-bench-vision-" + std::to_string(getpid()) + ".gguf";
  auto start = SteadyClock::now();
  if (absl::Status s = WriteSyntheticMmproj(
          {.preset = preset, .text_embedding_length = text_width, .weight_type = kGgmlF16}, path);
      !s.ok()) {
    std::remove(path.c_str());
    return Fail("walsh-bench vision", 1, "--preset " + preset + ": " + std::string(s.message()));
  }
  const double made_s = Since(start);
  start = SteadyClock::now();
  auto model = VisionModel::Load(
      path, text_width, {.cuda = device == "cuda", .cuda_device = static_cast<int>(cuda_device)});
  std::remove(path.c_str());
  if (!model.ok()) return Fail("walsh-bench vision", 1, std::string(model.status().message()));
  const double load_s = Since(start);
  const MmprojConfig& c = (*model)->config();
  ThreadPool pool(threads > 0
                      ? static_cast<int>(threads)
                      : static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  ThreadPool* const pool_or_null = device == "cpu" ? &pool : nullptr;
  std::printf(
      "projector: preset %s (%lld blocks of %lld, %lld heads), F16 weights as float32; made in "
      "%.1f s, loaded on %s in %.1f s; %s\n",
      preset.c_str(), static_cast<long long>(c.block_count),
      static_cast<long long>(c.embedding_length), static_cast<long long>(c.head_count), made_s,
      device.c_str(), load_s,
      device == "cpu" ? (std::to_string(pool.threads()) + " thread(s)").c_str() : "one stream");
  std::printf("| image | tokens | patches | seconds | GFLOP/s |\n|---|---|---|---|---|\n");
  nlohmann::json results = nlohmann::json::array();
  for (int64_t side : sides) {
    PixelValues px{.height = side, .width = side};
    px.planes.assign(3 * side * side, 0.25f);
    if (device == "cuda" && side == sides.front()) {  // the first launches load the kernels
      if (auto warm = (*model)->encoder().Encode(px); !warm.ok()) {
        return Fail("walsh-bench vision", 1, std::string(warm.status().message()));
      }
    }
    std::vector<double> times;
    for (int64_t r = 0; r < repeat; ++r) {
      start = SteadyClock::now();
      auto rows = (*model)->encoder().Encode(px, pool_or_null);
      times.push_back(Since(start));
      if (!rows.ok()) return Fail("walsh-bench vision", 1, std::string(rows.status().message()));
    }
    std::sort(times.begin(), times.end());
    const double seconds = times[times.size() / 2];
    const double gflops = EncodeFlop(c, side, side) / seconds / 1e9;
    const int64_t tokens = px.Tokens(c.patch_size, c.spatial_merge_size);
    const int64_t patches = (side / c.patch_size) * (side / c.patch_size);
    std::printf("| %lld² | %lld | %lld | %.3f | %.1f |\n", static_cast<long long>(side),
                static_cast<long long>(tokens), static_cast<long long>(patches), seconds, gflops);
    std::fflush(stdout);
    results.push_back({{"side", side},
                       {"tokens", tokens},
                       {"patches", patches},
                       {"seconds", seconds},
                       {"gflop_per_s", gflops}});
  }
  const double rss_gb = MaxResidentGb();
  std::printf("maximum resident: %.2f GB (host)\n", rss_gb);
  if (!json_path.empty()) {
    const nlohmann::json out = {{"device", device},
                                {"preset", preset},
                                {"threads", device == "cpu" ? pool.threads() : 0},
                                {"load_s", load_s},
                                {"max_resident_gb", rss_gb},
                                {"images", results}};
    std::ofstream(json_path) << out.dump(2) << "\n";
  }
  return 0;
}

}  // namespace walsh

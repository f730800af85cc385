#include "common/json_log.h"

#include <chrono>
#include <cstdio>

#include "absl/base/attributes.h"
#include "common/mutex.h"

namespace walsh {

void LogJson(const char* level, const std::string& event, nlohmann::json fields) {
  ABSL_CONST_INIT static Mutex mu(absl::kConstInit);
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  nlohmann::json line = {{"ts", now}, {"level", level}, {"event", event}};
  line.update(fields);
  const std::string text =
      line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  MutexLock l(&mu);
  std::fwrite(text.data(), 1, text.size(), stderr);
  std::fflush(stderr);
}

}  // namespace walsh

// The precompiled header of the services' and tools' own sources (walsh_share_service_pch in the
// top-level CMakeLists.txt): the third-party and standard headers most of them parse, so each
// build parses them once. Project headers stay out (they change, and a change here rebuilds
// everything); the generated walsh.v1 messages are in, as they change only with the contract.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "grpcpp/grpcpp.h"
#include "nlohmann/json.hpp"
#include "walsh/v1/generator.grpc.pb.h"

#include "common/protobuf_log.h"

#include <string>

#include "common/json_log.h"
#include "google/protobuf/stubs/logging.h"

namespace walsh {
namespace {

void LogProtobuf(google::protobuf::LogLevel level, const char* file, int line,
                 const std::string& message) {
  const char* name = level >= google::protobuf::LOGLEVEL_ERROR     ? "error"
                     : level == google::protobuf::LOGLEVEL_WARNING ? "warning"
                                                                   : "info";
  LogJson(name, "protobuf",
          {{"message", message}, {"source", std::string(file) + ":" + std::to_string(line)}});
}

}  // namespace

void RouteProtobufLogsToJson() { google::protobuf::SetLogHandler(&LogProtobuf); }

}  // namespace walsh

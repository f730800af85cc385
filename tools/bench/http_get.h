// A blocking HTTP/1.0 GET for the benchmark's scrapes of /metrics (no TLS, no redirects).
#ifndef WALSH_TOOLS_BENCH_HTTP_GET_H_
#define WALSH_TOOLS_BENCH_HTTP_GET_H_

#include <string>

#include "absl/status/statusor.h"

namespace walsh {

// The body of GET http://host:port/path, or an error naming the address.
absl::StatusOr<std::string> HttpGet(const std::string& host_port, const std::string& path);

}  // namespace walsh

#endif  // WALSH_TOOLS_BENCH_HTTP_GET_H_

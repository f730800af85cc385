// A bound, listening, non-blocking TCP socket for a listen flag's host:port ("[::1]:0",
// "0.0.0.0:8000"), for the HTTP servers that take their socket ready-made (libmicrohttpd's
// MHD_OPTION_LISTEN_SOCKET): the OpenAI face and /metrics. Errors name the flag.
#ifndef WALSH_COMMON_LISTEN_SOCKET_H_
#define WALSH_COMMON_LISTEN_SOCKET_H_

#include <string>

#include "absl/status/statusor.h"

namespace walsh {

absl::StatusOr<int> ListenSocket(const std::string& address, const std::string& flag);

// The port `fd` is bound to (port 0 asks the kernel for one); 0 if it cannot tell.
int BoundPort(int fd);

}  // namespace walsh

#endif  // WALSH_COMMON_LISTEN_SOCKET_H_

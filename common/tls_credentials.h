// gRPC credentials from PEM files: TLS for a server (mutual TLS when a client CA is given) and
// for a client (with a client certificate when one is given). Plaintext when no certificate is
// configured; callers warn when plaintext listens beyond loopback.
#ifndef WALSH_COMMON_TLS_CREDENTIALS_H_
#define WALSH_COMMON_TLS_CREDENTIALS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"

namespace walsh {

struct ServerTlsFiles {
  std::string cert, key;  // both or neither
  std::string client_ca;  // if set: clients must present a certificate signed by it
};

struct ClientTlsFiles {
  std::string ca;                             // if set: TLS, trusting this CA
  std::string cert, key;                      // if set: our client certificate (mutual TLS)
  std::string flag_prefix = "--worker-tls-";  // errors name FLAG_PREFIX{ca,cert,key}-file
};

// Errors name the flag's file that could not be read or is missing its pair.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerTlsFiles& files);
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const ClientTlsFiles& files);

// The PEM text of `path`; errors name `what` (the flag).
absl::StatusOr<std::string> ReadPem(const std::string& path, const char* what);

// Whether `address` (host:port) listens only on loopback.
bool IsLoopbackAddress(const std::string& address);

}  // namespace walsh

#endif  // WALSH_COMMON_TLS_CREDENTIALS_H_

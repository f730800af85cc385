#include "common/tls_credentials.h"

#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace walsh {
absl::StatusOr<std::string> ReadPem(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(what, ": cannot read '", path, "'"));
  std::stringstream ss;
  ss << in.rdbuf();
  if (ss.str().find("-----BEGIN") == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": '", path, "' holds no PEM block"));
  }
  return ss.str();
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerTlsFiles& f) {
  if (f.cert.empty() != f.key.empty()) {
    return absl::InvalidArgumentError("--tls-cert-file and --tls-key-file go together");
  }
  if (f.cert.empty()) {
    if (!f.client_ca.empty()) {
      return absl::InvalidArgumentError("--tls-client-ca-file needs --tls-cert-file");
    }
    return grpc::InsecureServerCredentials();
  }
  grpc::SslServerCredentialsOptions options(
      f.client_ca.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                          : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  auto cert = ReadPem(f.cert, "--tls-cert-file");
  if (!cert.ok()) return cert.status();
  auto key = ReadPem(f.key, "--tls-key-file");
  if (!key.ok()) return key.status();
  pair.cert_chain = *cert;
  pair.private_key = *key;
  options.pem_key_cert_pairs.push_back(pair);
  if (!f.client_ca.empty()) {
    auto ca = ReadPem(f.client_ca, "--tls-client-ca-file");
    if (!ca.ok()) return ca.status();
    options.pem_root_certs = *ca;
  }
  return grpc::SslServerCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const ClientTlsFiles& f) {
  const std::string ca_flag = f.flag_prefix + "ca-file", cert_flag = f.flag_prefix + "cert-file",
                    key_flag = f.flag_prefix + "key-file";
  if (f.cert.empty() != f.key.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(cert_flag, " and ", key_flag, " go together"));
  }
  if (f.ca.empty()) {
    if (!f.cert.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(cert_flag, " needs ", ca_flag));
    }
    return grpc::InsecureChannelCredentials();
  }
  grpc::SslCredentialsOptions options;
  auto ca = ReadPem(f.ca, ca_flag.c_str());
  if (!ca.ok()) return ca.status();
  options.pem_root_certs = *ca;
  if (!f.cert.empty()) {
    auto cert = ReadPem(f.cert, cert_flag.c_str());
    if (!cert.ok()) return cert.status();
    auto key = ReadPem(f.key, key_flag.c_str());
    if (!key.ok()) return key.status();
    options.pem_cert_chain = *cert;
    options.pem_private_key = *key;
  }
  return grpc::SslCredentials(options);
}

bool IsLoopbackAddress(const std::string& address) {
  return absl::StartsWith(address, "127.") || absl::StartsWith(address, "localhost:") ||
         absl::StartsWith(address, "[::1]:");
}

}  // namespace walsh

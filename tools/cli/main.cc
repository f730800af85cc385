// walsh-cli: a command-line client of the walsh.v1 API (a worker or the gateway).
//   walsh-cli generate --target HOST:PORT (--prompt TEXT | --messages JSON | --tokens IDS) [...]
//   walsh-cli info --target HOST:PORT
//   walsh-cli load --target HOST:PORT
//   walsh-cli health --target HOST:PORT   (exit 0 if SERVING: a container HEALTHCHECK)
// Over TLS with --tls-ca-file (and a client certificate for mutual TLS); --api-key for a gateway
// that requires keys.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/cli_flags.h"
#include "common/tls_credentials.h"
#include "google/protobuf/util/json_util.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "nlohmann/json.hpp"
#include "walsh/v1/generator.grpc.pb.h"

namespace walsh {
namespace {

int Fail(int code, const std::string& message) {
  std::fprintf(stderr, "walsh-cli: %s\n", message.c_str());
  return code;
}

int FailStatus(const grpc::Status& s) {
  return Fail(3, "rpc failed: " + std::to_string(s.error_code()) + " " + s.error_message());
}

int Run(int argc, char** argv) {
  std::string target = "127.0.0.1:50051", prompt, messages, tokens, output = "text", stop;
  int64_t max_tokens = -1, top_k = -1, logprobs = 0, priority = 0;
  double temperature = -1, top_p = -1, timeout = 0;
  uint64_t seed = 0;
  bool has_seed_flag = false, ignore_eos = false, thinking = false;
  FlagSet flags("walsh-cli generate|info|load|health --target HOST:PORT [generate flags]");
  flags.String("target", &target, "server address");
  flags.String("prompt", &prompt, "prompt text");
  flags.String("messages", &messages, "chat messages as JSON [{\"role\":..,\"content\":..}]");
  flags.String("tokens", &tokens, "prompt as comma-separated token ids");
  flags.Int("max-tokens", &max_tokens, "max tokens (default: the server's, 256)");
  flags.Double("temperature", &temperature, "sampling temperature (default 1; 0 greedy)");
  flags.Int("top-k", &top_k, "top-k");
  flags.Double("top-p", &top_p, "top-p");
  flags.Uint64("seed", &seed, "sampling seed");
  flags.Bool("use-seed", &has_seed_flag, "send --seed (implied when --seed is given)");
  flags.String("stop", &stop, "stop strings separated by '|'");
  flags.Bool("ignore-eos", &ignore_eos, "ignore end-of-sequence tokens");
  flags.Bool("thinking", &thinking, "with --messages: thinking on");
  flags.Int("logprobs", &logprobs, "top-N logprobs per token (json output)");
  flags.Int("priority", &priority, "request priority");
  flags.Double("timeout", &timeout, "deadline in seconds (0: none)");
  flags.String("output", &output, "text | ids | json");
  ClientTlsFiles tls;
  tls.flag_prefix = "--tls-";
  std::string tls_server_name;
  const char* env_key = std::getenv("WALSH_API_KEY");
  std::string api_key = env_key != nullptr ? env_key : "";
  flags.String("tls-ca-file", &tls.ca, "PEM CA that signed the server's certificate: use TLS");
  flags.String("tls-cert-file", &tls.cert, "PEM client certificate (mutual TLS)");
  flags.String("tls-key-file", &tls.key, "PEM private key of --tls-cert-file");
  flags.String("tls-server-name", &tls_server_name,
               "the name the server's certificate must carry (default: the target's host)");
  flags.String("api-key", &api_key,
               "sent as 'authorization: Bearer KEY' (default: $WALSH_API_KEY)");
  if (absl::Status s = flags.Parse(argc, argv); !s.ok()) return Fail(2, std::string(s.message()));
  if (flags.help_requested() || flags.positional().size() != 1) {
    std::fputs(flags.Help().c_str(), flags.help_requested() ? stdout : stderr);
    return flags.help_requested() ? 0 : 2;
  }
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]).rfind("--seed", 0) == 0) has_seed_flag = true;
  }
  if (tls.ca.empty() && (!tls.cert.empty() || !tls.key.empty() || !tls_server_name.empty())) {
    return Fail(2, "--tls-cert-file, --tls-key-file and --tls-server-name need --tls-ca-file");
  }
  auto credentials = MakeChannelCredentials(tls);
  if (!credentials.ok()) return Fail(2, std::string(credentials.status().message()));
  grpc::ChannelArguments args;
  if (!tls_server_name.empty()) args.SetSslTargetNameOverride(tls_server_name);
  auto channel = grpc::CreateCustomChannel(target, *credentials, args);
  const std::string command = flags.positional()[0];
  grpc::ClientContext ctx;
  if (!api_key.empty()) ctx.AddMetadata("authorization", "Bearer " + api_key);
  if (timeout > 0) {
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::milliseconds(static_cast<int64_t>(timeout * 1000)));
  }
  if (command == "info") {
    v1::ModelInfo info;
    grpc::Status s = v1::Generator::NewStub(channel)->GetModelInfo(&ctx, {}, &info);
    if (!s.ok()) return FailStatus(s);
    std::printf("%s\n", info.DebugString().c_str());
    return 0;
  }
  if (command == "health") {
    grpc::health::v1::HealthCheckResponse h;
    if (timeout <= 0) ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(3));
    grpc::Status s = grpc::health::v1::Health::NewStub(channel)->Check(&ctx, {}, &h);
    if (!s.ok()) return FailStatus(s);
    std::printf("%s\n",
                grpc::health::v1::HealthCheckResponse::ServingStatus_Name(h.status()).c_str());
    return h.status() == grpc::health::v1::HealthCheckResponse::SERVING ? 0 : 1;
  }
  if (command == "load") {
    v1::Load load;
    grpc::Status s = v1::Worker::NewStub(channel)->GetLoad(&ctx, {}, &load);
    if (!s.ok()) return FailStatus(s);
    std::printf("%s\n", load.DebugString().c_str());
    return 0;
  }
  if (command != "generate") return Fail(2, "unknown command " + command);

  v1::GenerateRequest req;
  if (!prompt.empty()) {
    req.set_text(prompt);
  } else if (!messages.empty()) {
    const nlohmann::json j = nlohmann::json::parse(messages, nullptr, false);
    if (!j.is_array()) return Fail(2, "--messages must be a JSON array");
    for (const auto& m : j) {
      v1::ChatMessage* cm = req.mutable_chat()->add_messages();
      cm->set_role(m.value("role", ""));
      cm->set_content(m.value("content", ""));
    }
    req.mutable_chat()->set_enable_thinking(thinking);
  } else if (!tokens.empty()) {
    for (absl::string_view p : absl::StrSplit(tokens, ',')) {
      int32_t id;
      if (!absl::SimpleAtoi(p, &id)) return Fail(2, "--tokens: not an id: " + std::string(p));
      req.mutable_tokens()->add_ids(id);
    }
  }
  if (max_tokens >= 0) req.mutable_stopping()->set_max_tokens(static_cast<uint32_t>(max_tokens));
  if (temperature >= 0) req.mutable_sampling()->set_temperature(static_cast<float>(temperature));
  if (top_k >= 0) req.mutable_sampling()->set_top_k(static_cast<int32_t>(top_k));
  if (top_p >= 0) req.mutable_sampling()->set_top_p(static_cast<float>(top_p));
  if (has_seed_flag) req.mutable_sampling()->set_seed(seed);
  if (!stop.empty()) {
    for (absl::string_view s : absl::StrSplit(stop, '|'))
      req.mutable_stopping()->add_stop(std::string(s));
  }
  req.mutable_stopping()->set_ignore_eos(ignore_eos);
  req.set_logprobs(static_cast<uint32_t>(logprobs));
  req.set_priority(static_cast<int32_t>(priority));

  auto reader = v1::Generator::NewStub(channel)->Generate(&ctx, req);
  v1::GenerateResponse resp;
  bool first = true;
  while (reader->Read(&resp)) {
    if (output == "json") {
      std::string line;
      google::protobuf::util::MessageToJsonString(resp, &line);
      std::printf("%s\n", line.c_str());
    } else if (resp.has_tokens()) {
      if (output == "ids") {
        for (const auto& t : resp.tokens().tokens())
          std::printf("%s%d", first ? "" : ",", t.id()), first = false;
      } else {
        std::fwrite(resp.tokens().text().data(), 1, resp.tokens().text().size(), stdout);
      }
    } else if (resp.has_finished()) {
      std::fprintf(stderr, "walsh-cli: finished: %s, %u prompt + %u completion tokens, %.3f s\n",
                   resp.finished().reason().c_str(), resp.finished().usage().prompt_tokens(),
                   resp.finished().usage().completion_tokens(),
                   resp.finished().timings().total_seconds());
    }
    std::fflush(stdout);
  }
  if (output != "json") std::printf("\n");
  grpc::Status s = reader->Finish();
  if (!s.ok()) return FailStatus(s);
  return 0;
}

}  // namespace
}  // namespace walsh

int main(int argc, char** argv) { return walsh::Run(argc, argv); }

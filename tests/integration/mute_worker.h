// A stand-in worker in the test process that passes every health, contract and load check but
// never answers a Generate or Resume: it holds each stream open until the caller gives up (the
// fault of a worker that accepts connections and then hangs).
#ifndef WALSH_TESTS_INTEGRATION_MUTE_WORKER_H_
#define WALSH_TESTS_INTEGRATION_MUTE_WORKER_H_

#include <atomic>
#include <memory>
#include <string>

#include "grpcpp/grpcpp.h"
#include "walsh/v1/generator.grpc.pb.h"

namespace walsh::testing {

class MuteWorker {
 public:
  explicit MuteWorker(std::string fingerprint = "mute");
  ~MuteWorker();
  std::string target() const { return "127.0.0.1:" + std::to_string(port_); }
  // Streams held open now, and ever taken.
  int open_streams() const { return open_.load(); }
  int streams_taken() const { return taken_.load(); }

 private:
  class Generator;
  class Worker;

  std::atomic<int> open_{0}, taken_{0};
  std::unique_ptr<Generator> generator_;
  std::unique_ptr<Worker> worker_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace walsh::testing

#endif  // WALSH_TESTS_INTEGRATION_MUTE_WORKER_H_

// walsh-bench serve: a streaming gRPC load generator for a worker or the gateway.
#ifndef WALSH_TOOLS_BENCH_SERVE_H_
#define WALSH_TOOLS_BENCH_SERVE_H_

namespace walsh {

// argv[0] is "serve". Returns the process exit code.
int ServeBenchMain(int argc, char** argv);

}  // namespace walsh

#endif  // WALSH_TOOLS_BENCH_SERVE_H_

# walsh-worker for NVIDIA GPU nodes (CUDA 13, sm_90). Ubuntu 24.04 ships the same gRPC 1.51,
# Protobuf 3.21 and Abseil 20220623 as Debian 12. The model is mounted read-only at /models.
#   docker build -f deploy/docker/worker-cuda.Dockerfile -t walsh-worker-cuda .
FROM nvidia/cuda:13.0.0-devel-ubuntu24.04 AS build
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      build-essential cmake ninja-build pkg-config libabsl-dev libssl-dev nlohmann-json3-dev \
      libicu-dev libgrpc++-dev libprotobuf-dev \
      protobuf-compiler protobuf-compiler-grpc libmicrohttpd-dev libgnutls28-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release -DWALSH_CUDA=ON -DWALSH_BUILD_TESTS=OFF \
    && cmake --build /build --target walsh-worker walsh-cli walsh-inspect

FROM nvidia/cuda:13.0.0-runtime-ubuntu24.04
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libgrpc++1.51t64 libprotobuf32t64 libabsl20220623t64 libmicrohttpd12t64 libgnutls30t64 libssl3t64 libicu74 \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --no-create-home walsh
COPY --from=build /build/worker/server/walsh-worker /build/tools/walsh-cli /build/tools/walsh-inspect \
     /usr/local/bin/
USER 10001
VOLUME ["/models"]
EXPOSE 50051 9090
HEALTHCHECK --interval=10s --timeout=3s --retries=60 \
  CMD ["/usr/local/bin/walsh-cli", "health", "--target", "127.0.0.1:50051"]
ENTRYPOINT ["/usr/local/bin/walsh-worker"]
CMD ["--model", "/models/model.gguf", "--listen", "0.0.0.0:50051", "--metrics-listen", "0.0.0.0:9090"]

# walsh-worker for CPU nodes. The model is not in the image: mount it read-only at /models.
# HEALTHCHECK retries for 10 minutes: a large model takes minutes to load.
#   docker build -f deploy/docker/worker-cpu.Dockerfile -t walsh-worker-cpu .
FROM debian:bookworm AS build
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      build-essential cmake ninja-build pkg-config libabsl-dev libssl-dev nlohmann-json3-dev \
      libicu-dev libgrpc++-dev libprotobuf-dev \
      protobuf-compiler protobuf-compiler-grpc libmicrohttpd-dev libgnutls28-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release -DWALSH_CUDA=OFF -DWALSH_BUILD_TESTS=OFF \
    && cmake --build /build --target walsh-worker walsh-cli walsh-inspect

FROM debian:bookworm-slim
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libgrpc++1.51 libprotobuf32 libabsl20220623 libmicrohttpd12 libgnutls30 libssl3 libicu72 \
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

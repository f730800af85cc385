# walsh-gateway: routes walsh.v1 streams over a worker pool. Build from the repository root:
#   docker build -f deploy/docker/gateway.Dockerfile -t walsh-gateway .
FROM debian:bookworm AS build
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      build-essential cmake ninja-build pkg-config libabsl-dev libssl-dev nlohmann-json3-dev \
      libicu-dev libgrpc++-dev libprotobuf-dev \
      protobuf-compiler protobuf-compiler-grpc libmicrohttpd-dev libgnutls28-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release -DWALSH_CUDA=OFF -DWALSH_BUILD_TESTS=OFF \
    && cmake --build /build --target walsh-gateway walsh-cli

FROM debian:bookworm-slim
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libgrpc++1.51 libprotobuf32 libabsl20220623 libmicrohttpd12 libgnutls30 libssl3 \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --no-create-home walsh
COPY --from=build /build/gateway/walsh-gateway /build/tools/walsh-cli /usr/local/bin/
USER 10001
EXPOSE 8080 8000 9091
HEALTHCHECK --interval=10s --timeout=3s --retries=3 \
  CMD ["/usr/local/bin/walsh-cli", "health", "--target", "127.0.0.1:8080"]
ENTRYPOINT ["/usr/local/bin/walsh-gateway"]
CMD ["--listen", "0.0.0.0:8080", "--metrics-listen", "0.0.0.0:9091"]

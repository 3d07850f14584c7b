# kafka-ext-proc: the processor binary on a distroless glibc base.
#
#   docker build --build-arg REVISION=$(git rev-parse HEAD) -t kafka-ext-proc .
#   docker run --rm -v $PWD/my.yaml:/etc/kafka-ext-proc/config.yaml:ro kafka-ext-proc
#
# Built with cgo against the librdkafka that confluent-kafka-go ships (a static
# glibc build for linux/amd64 and linux/arm64): no system librdkafka. The binary
# then needs only libc and libm, so the runtime stage is distroless "cc" of the
# same Debian release as the build stage (its glibc is at least as new): no
# shell, no package manager, a CA bundle for librdkafka's TLS to brokers.
#
# -tags nodev leaves the development stack out (the embedded Kafka broker and
# the Envoy emulator behind `kafka-ext-proc dev`): production never runs them.
# `go run ./cmd/kafka-ext-proc dev` from a checkout is unchanged.
#
# Both bases are pinned by tag and digest (the tag says what it is, the digest
# makes it so). Digests were not pulled where this file was written (no Docker
# engine there); refresh them with `docker buildx imagetools inspect IMAGE:TAG`.

# The Go version of go.mod: the image must not need to fetch a toolchain.
FROM golang:1.26.8-bookworm@sha256:a688600ca24f8a4d3ca77f95b0dd40704a9fc787c826660eb7ba0b641b8b175d AS build
WORKDIR /src
# Modules first, so source edits do not invalidate the download layer.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# The context has no .git, so the toolchain cannot stamp the commit that
# `version` and kafka_ext_proc_build_info report: pass it,
#   docker build --build-arg REVISION=$(git rev-parse HEAD) -t kafka-ext-proc .
ARG REVISION=
RUN CGO_ENABLED=1 go build -tags nodev -trimpath -ldflags="-s -w -X github.com/kafka-ext-proc/kafka-ext-proc/internal/buildinfo.revision=${REVISION}" -o /out/kafka-ext-proc ./cmd/kafka-ext-proc

FROM gcr.io/distroless/cc-debian12:nonroot@sha256:9dac0a79194e45a7da0158a9c6da57b217585af0786db3845d1f0ec1a0dd182f
COPY --from=build /out/kafka-ext-proc /kafka-ext-proc
# The base's nonroot user; numeric, so runAsNonRoot can verify it.
USER 65532:65532
# 50051: ext_proc (gRPC) — it trusts its peer: publish it to Envoy alone.
# 9090: admin (/metrics, /healthz, /readyz).
EXPOSE 50051 9090
# No HEALTHCHECK here: orchestrators probe themselves (docker-compose.yml runs
# `kafka-ext-proc healthcheck`; Envoy health-checks the gRPC port).
ENTRYPOINT ["/kafka-ext-proc"]
CMD ["serve", "--config", "/etc/kafka-ext-proc/config.yaml", "--listen", "0.0.0.0:50051", "--admin", "0.0.0.0:9090"]

# kafka-ext-proc: the processor binary on a small glibc base.
#
#   docker build -t kafka-ext-proc .
#   docker run --rm -v $PWD/my.yaml:/etc/kafka-ext-proc/config.yaml:ro kafka-ext-proc
#
# Built with cgo against the librdkafka that confluent-kafka-go ships (a static
# glibc build for linux/amd64 and linux/arm64): no system librdkafka, no build
# tags. The binary then needs only libc and libm, so the runtime stage is the
# same Debian release as the build stage (its glibc is at least as new).

# The Go version of go.mod: the image must not need to fetch a toolchain.
FROM golang:1.26.8-bookworm AS build
WORKDIR /src
# Modules first, so source edits do not invalidate the download layer.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=1 go build -trimpath -ldflags="-s -w" -o /out/kafka-ext-proc ./cmd/kafka-ext-proc

# A pinned Debian point release (distroless publishes no version tags). It has
# no CA bundle of its own: the build stage's lets librdkafka verify brokers'
# certificates (security.protocol SSL / SASL_SSL).
FROM debian:12.12-slim
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/kafka-ext-proc /kafka-ext-proc
# Not root; a numeric id needs no passwd entry.
USER 65532:65532
# 50051: ext_proc (gRPC) — it trusts its peer: publish it to Envoy alone.
# 9090: admin (/metrics, /healthz, /readyz).
EXPOSE 50051 9090
# No HEALTHCHECK here: orchestrators probe themselves (docker-compose.yml runs
# `kafka-ext-proc healthcheck`; Envoy health-checks the gRPC port).
ENTRYPOINT ["/kafka-ext-proc"]
CMD ["serve", "--config", "/etc/kafka-ext-proc/config.yaml", "--listen", "0.0.0.0:50051", "--admin", "0.0.0.0:9090"]

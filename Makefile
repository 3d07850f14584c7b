# Conveniences; `make test` is the README's test command, the whole suite.

FUZZTIME ?= 60s

.PHONY: test fuzz-smoke

test:
	go test -race -timeout 30m ./... && (cd deploy/kubernetes && go test -race ./...) && (cd deploy/observability && go test -race ./...) && (cd cmd/kafka-ext-proc-load && go test -race ./...)

# Fuzz every target for $(FUZZTIME) each (make fuzz-smoke FUZZTIME=5m).
fuzz-smoke:
	scripts/fuzz-smoke -t $(FUZZTIME)

# The linter CI runs (.golangci.yml; CONTRIBUTING.md says what it holds).
.PHONY: lint
lint:
	go run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v2.15.0 run ./...

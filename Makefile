# Conveniences; `go test -race ./...` is the whole suite (README).

FUZZTIME ?= 60s

.PHONY: test fuzz-smoke

test:
	go test -race ./...

# Fuzz every target for $(FUZZTIME) each (make fuzz-smoke FUZZTIME=5m).
fuzz-smoke:
	scripts/fuzz-smoke -t $(FUZZTIME)

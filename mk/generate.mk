# Protobuf code generation with buf. Included from the main Makefile:
#
#   include mk/generate.mk
#
# Targets:
#   generate        regenerate Go code from proto/**/*.proto (beside the .proto files)
#   generate-check  regenerate, then fail if proto/ differs from what is committed
#   lint-proto      buf lint (STANDARD rules, see buf.yaml)
#
# Nothing is installed by hand: buf is built from the version pinned in
# tools/go.mod (into bin/, gitignored), and buf.gen.yaml runs protoc-gen-go and
# protoc-gen-go-grpc with `go tool` from the versions pinned in
# tools/plugins/go.mod. Everything comes from the Go module proxy/cache; buf
# itself needs no network (the only import is a well-known type).
#
# The first build of buf takes a few minutes; later runs reuse the Go build
# cache and take a second or two.

# Repo root, derived from this file's location so the targets work whatever
# the including Makefile's directory is (make -C, make -f ...).
GEN_ROOT := $(abspath $(dir $(lastword $(MAKEFILE_LIST)))..)
GEN_BIN := $(GEN_ROOT)/bin
GEN_PROTO_DIR := proto
GEN_GO ?= go
GEN_BUF := $(GEN_BIN)/buf
# GOWORK=off: the tool modules are standalone, whatever go.work may appear.
GEN_ENV := GOWORK=off

.PHONY: generate generate-check lint-proto gen-buf

# Always invoke `go build`: it relinks only when the pinned version (or the
# toolchain) changed, and is a no-op (~0.5s) otherwise.
gen-buf:
	@$(GEN_ENV) $(GEN_GO) -C $(GEN_ROOT)/tools build -o $(GEN_BUF) github.com/bufbuild/buf/cmd/buf

# Generated files of removed .proto files are deleted first, so they cannot
# linger unnoticed (generate-check then reports them as deleted).
generate: gen-buf
	@cd $(GEN_ROOT) && find $(GEN_PROTO_DIR) -name '*.pb.go' -type f -delete
	cd $(GEN_ROOT) && $(GEN_ENV) $(GEN_BUF) generate

generate-check: generate
	@cd $(GEN_ROOT) && \
	if ! git diff --quiet -- $(GEN_PROTO_DIR) || [ -n "$$(git status --porcelain -- $(GEN_PROTO_DIR))" ]; then \
		echo "generate-check: generated code in $(GEN_PROTO_DIR)/ is stale or uncommitted:" >&2; \
		git status --porcelain -- $(GEN_PROTO_DIR) >&2; \
		git --no-pager diff --stat -- $(GEN_PROTO_DIR) >&2; \
		echo "generate-check: run 'make generate' and commit the result." >&2; \
		exit 1; \
	fi
	@echo "generate-check: generated code in $(GEN_PROTO_DIR)/ is up to date."

lint-proto: gen-buf
	cd $(GEN_ROOT) && $(GEN_ENV) $(GEN_BUF) lint

# syntax=docker/dockerfile:1
#
# rangecast images: one target per binary, each a static (CGO_ENABLED=0) Go
# build on distroless/static as the nonroot user (uid 65532).
#
#   docker build --target coordinator -t rangecast/coordinator .
#   docker build --target pageworker  -t rangecast/pageworker  .
#   docker build --target rangecast   -t rangecast/rangecast   .
#
# or `make images`. SQLite is modernc.org/sqlite (pure Go), so no cgo is needed.

ARG GO_VERSION=1.26

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
WORKDIR /src
# Caches under /cache, named here rather than left to the base image's home.
ENV CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOMODCACHE=/cache/gomod GOCACHE=/cache/gobuild
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/cache/gomod go mod download
COPY . .
ARG TARGETOS=linux
ARG TARGETARCH
# --version; `make images` passes them (git describe / rev-parse).
ARG VERSION=dev
ARG COMMIT=
RUN --mount=type=cache,target=/cache/gomod --mount=type=cache,target=/cache/gobuild \
    GOOS=${TARGETOS} GOARCH=${TARGETARCH} \
    go build -trimpath \
      -ldflags="-s -w -X github.com/rangecast/rangecast/internal/version.Version=${VERSION} -X github.com/rangecast/rangecast/internal/version.Commit=${COMMIT}" \
      -o /out/ ./cmd/coordinator ./cmd/pageworker ./cmd/rangecast

FROM gcr.io/distroless/static:nonroot AS coordinator
COPY --from=build /out/coordinator /coordinator
USER 65532:65532
# gRPC API, public HTTP, /metrics /healthz /readyz
EXPOSE 7070 8080 9090
ENTRYPOINT ["/coordinator"]

FROM gcr.io/distroless/static:nonroot AS pageworker
COPY --from=build /out/pageworker /pageworker
USER 65532:65532
# /metrics /healthz /readyz (the worker's default metrics port is 9091)
EXPOSE 9091
ENTRYPOINT ["/pageworker"]

# Last, so a plain `docker build .` gives the CLI.
FROM gcr.io/distroless/static:nonroot AS rangecast
COPY --from=build /out/rangecast /rangecast
USER 65532:65532
ENTRYPOINT ["/rangecast"]

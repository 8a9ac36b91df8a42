// Pinned protoc plugins, run by buf.gen.yaml through `go -C tools/plugins tool`.
// Keep protoc-gen-go at the google.golang.org/protobuf version of the root
// go.mod (the runtime the generated code is compiled against). Update with:
//   go -C tools/plugins get -tool google.golang.org/protobuf/cmd/protoc-gen-go@vX.Y.Z
//   go -C tools/plugins get -tool google.golang.org/grpc/cmd/protoc-gen-go-grpc@vX.Y.Z
// then run `make generate` and commit the regenerated code.
module github.com/rangecast/rangecast/tools/plugins

go 1.26.8

tool (
	google.golang.org/grpc/cmd/protoc-gen-go-grpc
	google.golang.org/protobuf/cmd/protoc-gen-go
)

require (
	google.golang.org/grpc/cmd/protoc-gen-go-grpc v1.6.2 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

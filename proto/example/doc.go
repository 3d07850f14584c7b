// Package example holds the demo services of kafka-ext-proc, generated from
// echo.proto and fanout.proto (shipped so that grpcurl -proto can call the
// demo): Echo, answered through the grpc-kafka produce route, and Fanout,
// a grpc-kafka fetch stream (and Publish, a oneway produce to its topic).
//
// The generated files are sources: regenerate them after editing a .proto
// with protoc and the pinned plugins,
//
//	go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
//	go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
//	go generate ./proto/example
package example

//go:generate protoc -I . --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative echo.proto fanout.proto

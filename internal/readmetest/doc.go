// Package readmetest runs the steps of a README as a test, so that what a
// README tells users to type, and what it says they will see, cannot drift
// from what the code does.
//
// A README's steps are the ```sh blocks of one section, each line a
// command, each optionally followed by a fenced block of the output it
// prints. The commands are interpreted here, in Go, with nothing else
// installed: curl with net/http; grpcurl with grpc-go, the method found
// among the protobuf files registered by the generated Go packages the test
// imports, requests built with dynamicpb and protojson and responses
// rendered as grpcurl prints them (JSON, or the text format that shows
// unknown fields); kcat -P / -C and `printf ... | base64`. Outputs are
// compared with placeholders (<etag>, <cid>) for the variable parts: a
// placeholder matches anything the first time and takes that value for
// the commands and outputs that follow.
package readmetest

// Command genschema writes the configuration's JSON Schema, built from its
// definition in package config, to the file it is given: go generate in
// processor/config runs it to refresh schema.json.
package main

import (
	"fmt"
	"os"

	"github.com/kafka-ext-proc/kafka-ext-proc/processor/config"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: genschema <file>")
		os.Exit(2)
	}
	if err := os.WriteFile(os.Args[1], config.Schema(), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "genschema:", err)
		os.Exit(1)
	}
}

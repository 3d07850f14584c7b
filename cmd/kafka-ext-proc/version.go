package main

import (
	"fmt"
	"io"

	"github.com/kafka-ext-proc/kafka-ext-proc/internal/buildinfo"
)

// version prints the module version and VCS commit stamped into the binary.
func version(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("version", stderr)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	fmt.Fprintln(stdout, buildinfo.Read())
	return nil
}

//go:build !linux

package main

import (
	"errors"
	"runtime"
)

// dropPageCache is Linux-only: elsewhere the uniform GETs on disk cannot
// start from a dropped page cache, and the run says so.
func dropPageCache(string, bool) (string, error) {
	return "", errors.New("dropping the page cache before the uniform GETs on disk: not supported on " + runtime.GOOS)
}

// Package faultfs is a file system for the view stores' tests that fails
// on demand: pebble's vfs.FS over the operating system's, whose table and
// blob files cannot be read while Fail is set (a damaged or unreadable disk). It is a
// fake because the fault cannot be had for real in a test: no disk of this
// machine is made to fail.
package faultfs

import (
	"errors"
	"path/filepath"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// ErrRead is what a read of a table or blob file returns while the file system
// fails.
var ErrRead = errors.New("input/output error (a fault the test made)")

// FailingReads is vfs.Default whose table files (.sst) and blob files
// (.blob: the values pebble keeps apart from their keys) fail every read
// while Fail is set.
type FailingReads struct {
	vfs.FS
	Fail atomic.Bool
}

// New returns a FailingReads over the operating system's file system.
func New() *FailingReads { return &FailingReads{FS: vfs.Default} }

// Open opens name, its reads failing while f fails if it is a table or blob
// file.
func (f *FailingReads) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	file, err := f.FS.Open(name, opts...)
	if ext := filepath.Ext(name); err != nil || (ext != ".sst" && ext != ".blob") {
		return file, err
	}
	return &failingFile{File: file, fs: f}, nil
}

type failingFile struct {
	vfs.File
	fs *FailingReads
}

func (f *failingFile) ReadAt(p []byte, off int64) (int, error) {
	if f.fs.Fail.Load() {
		return 0, ErrRead
	}
	return f.File.ReadAt(p, off)
}

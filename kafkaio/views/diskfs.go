package views

import (
	"github.com/cockroachdb/pebble/v2/vfs"
)

// writeBufferBytes is what a file the store writes gathers before it is
// written through (see bufferedFS).
const writeBufferBytes = 1 << 20

// bufferedFS gives each file pebble creates a write buffer of
// writeBufferBytes. pebble writes a table or blob file through a buffer of
// 4 KiB (a block of 32 KiB costs two writes, neither aligned to a page)
// while the kernel writes back what the file's earlier syncs asked for: in
// a first load of 4 GiB of values that do not compress, the write calls
// were a fifth of the processor's CPU (19.8 s). Written in pieces of a
// megabyte, the same bytes cost the kernel 11.6 s (BENCHMARKS.md, "Writes
// of a megabyte").
//
// Nothing is lost that was promised: every call that reads, syncs, sizes
// or closes the file writes the buffer through first, so a sync covers
// every byte written before it, as pebble relies on; only the point at
// which a write error surfaces moves, to the next such call, and pebble
// checks the error of the sync that ends every file it writes.
type bufferedFS struct {
	vfs.FS
}

// Create creates the file with a write buffer.
func (fs bufferedFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, category)
	if err != nil {
		return nil, err
	}
	return &bufferedFile{File: f}, nil
}

// bufferedFile is a file created by bufferedFS. Like the files pebble
// writes, it is not for concurrent use.
type bufferedFile struct {
	vfs.File
	buf []byte
	// through is the size of the file written through: SyncTo needs no
	// flush of the buffer if the prefix it syncs is below it.
	through int64
}

// Write gathers p in the buffer; a write of a buffer or more into an empty
// buffer goes through at once.
func (f *bufferedFile) Write(p []byte) (int, error) {
	if len(f.buf)+len(p) > writeBufferBytes {
		if err := f.flush(); err != nil {
			return 0, err
		}
	}
	if len(p) >= writeBufferBytes {
		n, err := f.File.Write(p)
		f.through += int64(n)
		return n, err
	}
	if f.buf == nil {
		f.buf = make([]byte, 0, writeBufferBytes)
	}
	f.buf = append(f.buf, p...)
	return len(p), nil
}

func (f *bufferedFile) flush() error {
	if len(f.buf) == 0 {
		return nil
	}
	n, err := f.File.Write(f.buf)
	f.through += int64(n)
	if err != nil {
		// What was not written stays, for the call that reports it.
		f.buf = f.buf[:copy(f.buf, f.buf[n:])]
		return err
	}
	f.buf = f.buf[:0]
	return nil
}

func (f *bufferedFile) Close() error {
	err := f.flush()
	f.buf = nil
	if cerr := f.File.Close(); err == nil {
		err = cerr
	}
	return err
}

func (f *bufferedFile) Sync() error {
	if err := f.flush(); err != nil {
		return err
	}
	return f.File.Sync()
}

func (f *bufferedFile) SyncData() error {
	if err := f.flush(); err != nil {
		return err
	}
	return f.File.SyncData()
}

// SyncTo syncs the file's first length bytes, writing the buffer through
// first only if they reach into it (pebble asks for what lies a megabyte
// behind its writes, mostly written through already).
func (f *bufferedFile) SyncTo(length int64) (bool, error) {
	if length > f.through {
		if err := f.flush(); err != nil {
			return false, err
		}
	}
	return f.File.SyncTo(length)
}

func (f *bufferedFile) Stat() (vfs.FileInfo, error) {
	if err := f.flush(); err != nil {
		return nil, err
	}
	return f.File.Stat()
}

func (f *bufferedFile) Read(p []byte) (int, error) {
	if err := f.flush(); err != nil {
		return 0, err
	}
	return f.File.Read(p)
}

func (f *bufferedFile) ReadAt(p []byte, off int64) (int, error) {
	if err := f.flush(); err != nil {
		return 0, err
	}
	return f.File.ReadAt(p, off)
}

func (f *bufferedFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.flush(); err != nil {
		return 0, err
	}
	return f.File.WriteAt(p, off)
}

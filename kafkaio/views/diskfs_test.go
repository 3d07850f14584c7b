package views

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// writesFS records the size of every write that reaches its files, and
// fails them while failing is set.
type writesFS struct {
	vfs.FS
	writes  []int
	failing error
}

func (fs *writesFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, c)
	if err != nil {
		return nil, err
	}
	return &writesFile{File: f, fs: fs}, nil
}

type writesFile struct {
	vfs.File
	fs *writesFS
}

func (f *writesFile) Write(p []byte) (int, error) {
	if f.fs.failing != nil {
		return 0, f.fs.failing
	}
	f.fs.writes = append(f.fs.writes, len(p))
	return f.File.Write(p)
}

func (f *writesFile) SyncTo(int64) (bool, error) { return false, nil }

// contents reads the file name of fs whole.
func contents(t *testing.T, fs vfs.FS, name string) []byte {
	t.Helper()
	f, err := fs.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// pieces writes n pieces of size bytes each to f, each of its own bytes,
// and returns what it wrote (copied first: a vfs.File may scribble on what
// it is given, and pebble's memory file system does under -race).
func pieces(t *testing.T, f vfs.File, n, size int) []byte {
	t.Helper()
	var all []byte
	for i := range n {
		p := bytes.Repeat([]byte{byte(i)}, size)
		all = append(all, p...)
		if _, err := f.Write(p); err != nil {
			t.Fatal(err)
		}
	}
	return all
}

// A file of the store's reaches the disk in writes of a megabyte, whatever
// the pieces pebble writes, and a sync or a close leaves nothing behind.
func TestBufferedFilesWriteInMegabytes(t *testing.T) {
	under := &writesFS{FS: vfs.NewMem()}
	fs := bufferedFS{under}
	f, err := fs.Create("table", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	// 40 blocks of 32 KiB and a trailer: 1.25 MiB.
	want := pieces(t, f, 40, 32<<10+5)
	if len(under.writes) != 1 || under.writes[0] > writeBufferBytes || under.writes[0] < writeBufferBytes-(32<<10+5) {
		t.Fatalf("writes reaching the file: %v, want one of about %d bytes", under.writes, writeBufferBytes)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if got := contents(t, under, "table"); !bytes.Equal(got, want) {
		t.Fatalf("after the sync the file holds %d bytes, want the %d written", len(got), len(want))
	}
	// A piece of a buffer or more goes through at once; Close writes the
	// rest.
	more := pieces(t, f, 1, 100)
	more = append(more, pieces(t, f, 1, 2*writeBufferBytes)...)
	more = append(more, pieces(t, f, 1, 7)...)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if got := contents(t, under, "table"); !bytes.Equal(got, slices.Concat(want, more)) {
		t.Fatalf("after the close the file holds %d bytes, want the %d written", len(got), len(want)+len(more))
	}
}

// SyncTo of a prefix written through already leaves the buffer as it is;
// of one that reaches into it, writes it through first, so the prefix
// synced is on the file.
func TestBufferedFileSyncToWritesThePrefixThrough(t *testing.T) {
	under := &writesFS{FS: vfs.NewMem()}
	f, err := bufferedFS{under}.Create("blob", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	pieces(t, f, 3, writeBufferBytes/2) // 1 MiB through, 512 KiB buffered
	if _, err := f.SyncTo(writeBufferBytes); err != nil {
		t.Fatal(err)
	}
	if len(under.writes) != 1 {
		t.Fatalf("SyncTo of the prefix written through wrote %v", under.writes)
	}
	if _, err := f.SyncTo(writeBufferBytes + 1); err != nil {
		t.Fatal(err)
	}
	if len(under.writes) != 2 || under.writes[1] != writeBufferBytes/2 {
		t.Fatalf("SyncTo into the buffer: writes %v, want the buffer's %d bytes written", under.writes, writeBufferBytes/2)
	}
}

// A write that fails is reported by the sync after it, and the bytes it
// did not write are not dropped: the sync that follows a recovery writes
// them.
func TestBufferedFileReportsAFailedWriteAtTheSync(t *testing.T) {
	under := &writesFS{FS: vfs.NewMem()}
	f, err := bufferedFS{under}.Create("table", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	want := pieces(t, f, 4, 1000)
	full := errors.New("no space left on device")
	under.failing = full
	if err := f.Sync(); !errors.Is(err, full) {
		t.Fatalf("Sync after a failed write: %v, want %v", err, full)
	}
	under.failing = nil
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if got := contents(t, under, "table"); !bytes.Equal(got, want) {
		t.Fatalf("the file holds %d bytes, want the %d written", len(got), len(want))
	}
}

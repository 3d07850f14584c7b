package main

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Ways dropPageCache evicted the store's pages.
const (
	dropCachesAll = "drop_caches" // every clean page of the machine (root)
	dropCachesOwn = "fadvise"     // the store's files alone
)

// dropPageCache writes the machine's dirty pages back and evicts the files
// under dir from the kernel's page cache, so the next reads of the store
// go to the disk; it returns which way it took. It asks the kernel to drop
// each file's pages (POSIX_FADV_DONTNEED), which it may decline for pages
// in use; with all, as root, it drops every clean page of the machine
// (/proc/sys/vm/drop_caches), the only way to be sure, but one that makes
// every other program's files cold too (not for a test). Where that is
// refused (not root, a container's read-only /proc/sys) it falls back to
// the files'.
func dropPageCache(dir string, all bool) (string, error) {
	unix.Sync()
	if all && os.Geteuid() == 0 {
		if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("1"), 0); err == nil {
			return dropCachesAll, nil
		}
	}
	err := eachFile(dir, func(f *os.File) error {
		return unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
	})
	if err != nil {
		return "", fmt.Errorf("dropping the view store's pages from the page cache: %w", err)
	}
	return dropCachesOwn, nil
}

package views_test

import (
	"testing"

	"github.com/kafka-ext-proc/kafka-ext-proc/kafkaio/views"
)

// store is a view store the tests of views run against: every test of a
// Views runs once with its views in memory and once with them on disk, so
// both answer alike.
type store struct {
	name string
	disk bool
}

var stores = []store{{name: "memory"}, {name: "disk", disk: true}}

// bothStores runs test once per store, as subtests named after it. The
// two run at once: each has its own broker and directory, and most of
// their time is spent waiting on the broker. A test that reads what the
// whole process holds (its goroutines, its heap) runs the stores in turn.
func bothStores(t *testing.T, test func(t *testing.T, st store)) {
	t.Helper()
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			test(t, st)
		})
	}
}

// options are o with st's views: on disk, every topic's view is, in a
// directory of the test's own.
func (st store) options(t *testing.T, o views.Options) views.Options {
	t.Helper()
	if st.disk {
		o.DiskStore = func(string) bool { return true }
		o.StoreDir = t.TempDir()
		// Every first load in bulk, as a large one is: the tests' topics
		// are small.
		o.BulkLoadRecords = 1
	}
	return o
}

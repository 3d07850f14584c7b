package e2e_test

import (
	"flag"
	"os"
	"testing"
)

// parallel is how many tests run at once when -parallel is not given. The
// tests wait on Kafka and on the timeouts they exercise far more than they
// compute (the package uses about a quarter of a core run one at a time),
// so four at a time fits a two-core machine; -parallel N still decides.
const parallel = "4"

func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		if err := flag.Set("test.parallel", parallel); err != nil {
			panic(err)
		}
	}
	os.Exit(m.Run())
}

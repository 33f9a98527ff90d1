package jetlooptest_test

import (
	"flag"
	"testing"

	"github.com/jetloop/jetloop/internal/testkit"
)

var update = flag.Bool("update", false, "rewrite testdata/go-doc.txt")

// TestGoDoc holds the package's public surface to testdata/go-doc.txt.
func TestGoDoc(t *testing.T) { testkit.GoDocGolden(t, *update) }

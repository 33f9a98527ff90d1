package jetlooptest_test

import (
	"flag"
	"testing"

	"github.com/jetloop/jetloop/internal/sdktest"
)

var update = flag.Bool("update", false, "rewrite testdata/go-doc.txt")

// TestGoDoc holds the package's public surface to testdata/go-doc.txt.
func TestGoDoc(t *testing.T) { sdktest.GoDocGolden(t, *update) }

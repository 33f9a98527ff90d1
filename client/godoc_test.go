package client_test

import (
	"flag"
	"testing"

	"github.com/jetloop/jetloop/internal/testkit"
)

var update = flag.Bool("update", false, "rewrite testdata/go-doc.txt from go doc -all")

// The package's public surface is testdata/go-doc.txt: a change to it is a
// visible diff in review.
func TestGoDoc(t *testing.T) { testkit.GoDocGolden(t, *update) }

// Package examples_test checks that the README shows the examples exactly as
// they are in examples/, which CI builds, so the README's code compiles.
package examples_test

import (
	"os"
	"strings"
	"testing"
)

func TestReadmeShowsExamples(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"custom-worker/main.go"} {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		// The README quotes the file from its first import on.
		body := string(src)
		if i := strings.Index(body, "import ("); i >= 0 {
			body = body[i:]
		}
		if !strings.Contains(string(readme), body) {
			t.Errorf("README.md does not show examples/%s verbatim (from its imports on); copy it again", f)
		}
	}
}

package redistest

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

var goBlock = regexp.MustCompile("(?s)```go\n(.*?)```")

// CodeBlocksIn checks that the markdown page has at least atLeast ```go
// blocks and that each stands as it is in the Go file src, so that the
// page shows no code that does not build (the file is compiled with the
// test that calls this).
func CodeBlocksIn(t testing.TB, page, src string, atLeast int) {
	t.Helper()
	text, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	code, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	blocks := goBlock.FindAllSubmatch(text, -1)
	if len(blocks) < atLeast {
		t.Fatalf("%s has %d go blocks; the test expected at least %d", page, len(blocks), atLeast)
	}
	for _, b := range blocks {
		if !strings.Contains(string(code), string(b[1])) {
			t.Errorf("this block of %s is not in %s, so it is not compiled:\n%s", page, src, b[1])
		}
	}
}

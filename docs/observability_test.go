package docs_test

import (
	"os"
	"strings"
	"testing"

	"github.com/fairlock/fairlock/internal/measures"
)

// observability.md lists every measure the modules and the demo make,
// under both its names and with its unit.
func TestObservabilityListsEveryMeasure(t *testing.T) {
	b, err := os.ReadFile("observability.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, m := range measures.All {
		row := "| `" + m.OTel + "`"
		i := strings.Index(doc, row)
		if i < 0 {
			t.Errorf("observability.md has no row for %s", m.OTel)
			continue
		}
		line, _, _ := strings.Cut(doc[i:], "\n")
		if !strings.Contains(line, "`"+m.Prom+"`") || !strings.Contains(line, "| "+m.Unit+" |") {
			t.Errorf("observability.md's row for %s lacks %s or its unit %s: %s", m.OTel, m.Prom, m.Unit, line)
		}
	}
}

package docs_test

import (
	"testing"

	"github.com/fairlock/fairlock/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Exit(m) }

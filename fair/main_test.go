package fair_test

import (
	"os"
	"testing"

	"github.com/fairlock/fairlock/internal/redistest"
)

func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }

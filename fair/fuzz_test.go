package fair_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// Names and options from users: New never panics, and refuses exactly what
// is invalid, with an error wrapping ErrInvalidArgument.
func FuzzNew(f *testing.F) {
	f.Add("jobs", int64(30*time.Second), 0.01, int64(10*time.Second), int64(5*time.Second), "label")
	f.Add("", int64(0), -1.0, int64(-1), int64(0), strings.Repeat("x", 201))
	f.Add("a{b}", int64(time.Millisecond), 0.5, int64(10*time.Millisecond), int64(time.Millisecond), "a|b\tc")
	f.Add("ünïcode name with spaces", int64(1<<62), 0.4999, int64(1<<62), int64(1<<62), "")
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // New never dials
	f.Cleanup(func() { _ = c.Close() })
	f.Fuzz(func(t *testing.T, name string, lease int64, drift float64, wait, cleanup int64, label string) {
		m, err := fair.New(redistest.Owner(c), name,
			fairlock.WithLease(time.Duration(lease)), fairlock.WithDriftFactor(drift),
			fairlock.WithWaitTimeout(time.Duration(wait)), fairlock.WithCleanupTimeout(time.Duration(cleanup)),
			fair.WithLabel(label))
		valid := name != "" && len(name) <= fairlock.MaxNameLen && !strings.ContainsAny(name, "{}") &&
			time.Duration(lease) >= 10*time.Millisecond && drift >= 0 && drift < 0.5 &&
			time.Duration(wait) >= 10*time.Millisecond && time.Duration(cleanup) >= time.Millisecond &&
			len(label) <= 200
		switch {
		case valid && err != nil:
			t.Fatalf("New(%q, ...) refused valid input: %v", name, err)
		case !valid && err == nil:
			t.Fatalf("New(%q, lease %v, drift %v, wait %v, cleanup %v, label of %d bytes) accepted invalid input",
				name, time.Duration(lease), drift, time.Duration(wait), time.Duration(cleanup), len(label))
		case err != nil && !errors.Is(err, fairlock.ErrInvalidArgument):
			t.Fatalf("New's error %v does not wrap ErrInvalidArgument", err)
		case err == nil && m == nil:
			t.Fatal("New returned neither a handle nor an error")
		}
	})
}

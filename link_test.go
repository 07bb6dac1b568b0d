package fairlock_test

import (
	"errors"
	"testing"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/internal/core"
	"github.com/fairlock/fairlock/internal/transport"
	"github.com/fairlock/fairlock/reentrant"
	"github.com/redis/go-redis/v9"
)

// The errors and limits a user reads in this package are the ones the
// library returns and enforces.
func TestPublicValuesAreTheLibrarys(t *testing.T) {
	same := map[string][2]error{
		"ErrInvalidArgument":    {fairlock.ErrInvalidArgument, core.ErrInvalidArgument},
		"ErrNotHeld":            {fairlock.ErrNotHeld, core.ErrNotHeld},
		"ErrLockLost":           {fairlock.ErrLockLost, core.ErrLockLost},
		"ErrReleased":           {fairlock.ErrReleased, core.ErrReleased},
		"ErrPending":            {fairlock.ErrPending, core.ErrPending},
		"ErrClosed":             {fairlock.ErrClosed, core.ErrClosed},
		"transport's ErrClosed": {fairlock.ErrClosed, transport.ErrClosed},
		"ErrNotReplicated":      {fairlock.ErrNotReplicated, core.ErrNotReplicated},
		"ErrDataLayout":         {fairlock.ErrDataLayout, core.ErrDataLayout},
	}
	for name, v := range same {
		if v[0] != v[1] {
			t.Errorf("%s: the library returns %v, not the public value", name, v[1])
		}
	}
	if errors.Is(fairlock.ErrLockLost, fairlock.ErrNotHeld) || errors.Is(fairlock.ErrNotHeld, fairlock.ErrLockLost) {
		t.Error("ErrLockLost matches ErrNotHeld: code that ignores a second Unlock's ErrNotHeld would swallow a loss")
	}
	if fairlock.MaxNameLen != core.MaxNameLen {
		t.Errorf("MaxNameLen says %d, the library enforces %d", fairlock.MaxNameLen, core.MaxNameLen)
	}
	if fairlock.DefaultWaitTimeout != core.DefaultWaitTimeout {
		t.Errorf("DefaultWaitTimeout says %v, the library's default is %v", fairlock.DefaultWaitTimeout, core.DefaultWaitTimeout)
	}
}

// A zero Option, which no With function makes, is refused, not a panic.
func TestZeroOptionsAreRefused(t *testing.T) {
	owner, err := fairlock.NewOwner(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fair.New(owner, "jobs", fairlock.Option{}); !errors.Is(err, fairlock.ErrInvalidArgument) {
		t.Errorf("fair.New with a zero Option: %v, want ErrInvalidArgument", err)
	}
	if _, err := reentrant.New(owner, "jobs", fairlock.MutexOption{}); !errors.Is(err, fairlock.ErrInvalidArgument) {
		t.Errorf("reentrant.New with a zero MutexOption: %v, want ErrInvalidArgument", err)
	}
}

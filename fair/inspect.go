package fair

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/fairlock/fairlock/internal/core"
	"github.com/fairlock/fairlock/internal/lua"
	"github.com/redis/go-redis/v9"
)

// State is a snapshot of a fair lock, as Inspect returns it.
type State struct {
	// Holder is the current hold, nil when the lock is free.
	Holder *Holder
	// Queue lists the waiters in the order they will be served. Entries whose
	// deadline passed are kept, marked Expired: the next script call evicts
	// them. Waiters that gave up are not listed.
	Queue []Waiter
}

// Holder describes the current hold.
type Holder struct {
	Owner string        // owner id of the holding handle
	Count int           // re-entries
	TTL   time.Duration // remaining lease
	Token int64         // fencing token
	// Pending is true while a hand-off has not been claimed by the grantee:
	// if it died, the hold expires within one wait timeout.
	Pending bool
	// Entry is the queue entry a pending hand-off was granted to.
	Entry string
	Origin
}

// Waiter is one queue entry.
type Waiter struct {
	Owner string // owner id of the waiting handle
	Entry string // the entry's id: fresh for every join
	// Deadline is how long the waiter may stay silent from now, by Redis's
	// clock; negative once it passed.
	Deadline time.Duration
	Expired  bool
	Origin
}

// Origin is where a handle runs, and its label.
type Origin struct {
	Host  string
	PID   int
	Label string // WithLabel's text
}

func parseOrigin(s string) Origin {
	parts := strings.SplitN(s, "\t", 3)
	if len(parts) < 3 {
		return Origin{Label: s}
	}
	pid, _ := strconv.Atoi(parts[1])
	return Origin{Host: parts[0], PID: pid, Label: parts[2]}
}

// Inspect reads the state of the fair lock name without changing it.
func Inspect(ctx context.Context, client redis.UniversalClient, name string) (State, error) {
	if err := core.CheckClient(client); err != nil {
		return State{}, err
	}
	if err := core.CheckName(name); err != nil {
		return State{}, err
	}
	v, err := lua.Default.FairInspect.Run(ctx, client, keysOf(name)).Slice()
	if err != nil {
		return State{}, fmt.Errorf("fairlock: inspecting lock %q: %w", name, err)
	}
	return parseInspect(v)
}

func parseInspect(v []any) (State, error) {
	if len(v) < 7 {
		return State{}, fmt.Errorf("fairlock: unexpected inspect reply of %d elements", len(v))
	}
	str := func(i int) string { s, _ := v[i].(string); return s }
	num := func(i int) int64 { n, _ := v[i].(int64); return n }
	var s State
	if owner := str(1); owner != "" {
		s.Holder = &Holder{
			Owner: owner, Count: int(num(2)), TTL: time.Duration(num(3)) * time.Millisecond,
			Token: num(4), Origin: parseOrigin(str(5)), Pending: str(6) != "", Entry: str(6),
		}
	}
	now := num(0)
	for i := 7; i+2 < len(v); i += 3 {
		entry, deadline, info := str(i), num(i+1), str(i+2)
		if deadline < 0 {
			continue // a tombstone: it gave up
		}
		w := Waiter{Entry: entry, Deadline: time.Duration(deadline-now) * time.Millisecond, Expired: deadline <= now}
		if j := strings.LastIndexByte(entry, '/'); j >= 0 {
			w.Owner = entry[:j]
		}
		// info is "lease|wait|origin".
		if parts := strings.SplitN(info, "|", 3); len(parts) == 3 {
			w.Origin = parseOrigin(parts[2])
		}
		s.Queue = append(s.Queue, w)
	}
	return s, nil
}

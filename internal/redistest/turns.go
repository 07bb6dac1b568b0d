package redistest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Holder is a handle whose hold can be watched.
type Holder interface {
	Lost() <-chan struct{}
}

// TurnLocker is a lock handle as HoldsEndingByLease drives it.
type TurnLocker interface {
	Holder
	Lock(ctx context.Context) error
	TryLock(ctx context.Context, wait, lease time.Duration) (bool, error)
}

// HoldsEndingByLease runs LeaseTurns on every deployment, with six
// handles of one lock taking 500 ms holds that nobody unlocks, two ways:
// TryLock(wait 10 s, lease 500 ms), and Lock with a 500 ms watchdog lease
// whose client is closed at once (a holder whose process died). newLock
// makes handle i on c; lease, when not 0, is its watchdog lease.
func HoldsEndingByLease(t *testing.T, ordered bool, newLock func(c redis.UniversalClient, name string, i int, lease time.Duration) (TurnLocker, error)) {
	const lease = 500 * time.Millisecond
	for _, d := range Deployments {
		for _, dies := range []bool{false, true} {
			name := string(d) + "/" + map[bool]string{false: "fixed leases", true: "holders that die"}[dies]
			t.Run(name, func(t *testing.T) {
				NoLeaks(t)
				clients := Clients(t, d, 6)
				lock := Name(t)
				LeaseTurns(t, 6, lease, ordered, func(i int, start func()) (Holder, error) {
					watchdog := time.Duration(0)
					if dies {
						watchdog = lease
					}
					m, err := newLock(clients[i], lock, i, watchdog)
					if err != nil {
						return nil, err
					}
					start()
					if dies {
						err = m.Lock(context.Background())
						_ = clients[i].Close() // the process dies holding the lock
						return m, err
					}
					ok, err := m.TryLock(context.Background(), 10*time.Second, lease)
					if err == nil && !ok {
						err = fmt.Errorf("caller %d: TryLock = false: its 10 s wait elapsed", i)
					}
					return m, err
				})
			})
		}
	}
}

// LeaseTurns checks that holds ending by their lease pass the lock on at
// once. It starts n callers 100 ms apart; caller i acquires through acquire,
// which calls start just before it asks, and never unlocks, so each hold
// ends when its lease (lease) runs out. Each caller must take the lock no
// sooner than the previous holder's lease allows and at most a margin later;
// with ordered, in the order they joined. It returns once every hold ended.
func LeaseTurns(t *testing.T, n int, lease time.Duration, ordered bool, acquire func(i int, start func()) (Holder, error)) {
	t.Helper()
	begin := time.Now()
	at := make([]time.Duration, n)
	holders := make([]Holder, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		joined := make(chan struct{})
		var once sync.Once
		start := func() { once.Do(func() { close(joined) }) }
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer start() // acquire may fail before it asks
			holders[i], errs[i] = acquire(i, start)
			at[i] = time.Since(begin)
		}()
		<-joined
		time.Sleep(100 * time.Millisecond)
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for i := range at {
			t.Logf("caller %d returned at %v: %v", i, at[i].Round(time.Millisecond), errs[i])
		}
		t.Fatal(err)
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return int(at[a] - at[b]) })
	// A turn after a lease may come late by a round trip and this machine's
	// scheduling (2 shared cores, -race): 150 ms covers it. The bug this
	// guards against made it late by a heartbeat (3.3 s by default).
	const margin = 150 * time.Millisecond
	for k, i := range order {
		t.Logf("caller %d acquired at %v", i, at[i].Round(time.Millisecond))
		if ordered && i != k {
			t.Fatalf("caller %d was served %d-th: not in join order", i, k)
		}
		if k == 0 {
			continue
		}
		prev := order[k-1]
		gap := at[i] - at[prev]
		if gap < lease-20*time.Millisecond {
			t.Fatalf("caller %d took the lock %v after caller %d, before its %v lease ended", i, gap, prev, lease)
		}
		if gap > lease+margin {
			t.Fatalf("caller %d took the lock %v after caller %d: more than its %v lease plus %v", i, gap, prev, lease, margin)
		}
	}
	if last := at[order[n-1]] - at[order[0]]; last > time.Duration(n-1)*lease+300*time.Millisecond {
		t.Fatalf("the last of %d holders took the lock %v after the first, want about %v", n, last, time.Duration(n-1)*lease)
	}
	for i, h := range holders {
		select {
		case <-h.Lost():
		case <-time.After(5 * time.Second):
			t.Fatalf("caller %d's hold never ended", i)
		}
	}
}

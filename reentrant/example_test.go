package reentrant_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/reentrant"
	"github.com/redis/go-redis/v9"
)

func Example() {
	mr, _ := miniredis.Run() // any Redis >= 7.0 will do
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close()
	owner, _ := fairlock.NewOwner(client)   // one per client: its handles share it
	defer owner.Close(context.Background()) // leaves queues, releases holds
	ctx := context.Background()

	m, err := reentrant.New(owner, "nightly-report")
	if err != nil {
		panic(err)
	}
	if err := m.Lock(ctx); err != nil {
		panic(err)
	}
	defer m.Unlock(ctx)

	// Work under the lock stops by itself if the hold is lost.
	work := m.HoldContext()
	fmt.Println("holding:", work.Err() == nil)
	// Output: holding: true
}

// TryLock with wait 0 is one attempt; a positive lease is fixed, with no
// watchdog, and the hold's context re-enters.
func ExampleMutex_TryLock() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close()
	owner, _ := fairlock.NewOwner(client)   // one per client: its handles share it
	defer owner.Close(context.Background()) // leaves queues, releases holds
	ctx := context.Background()

	a, _ := reentrant.New(owner, "cache-refresh")
	b, _ := reentrant.New(owner, "cache-refresh")

	ok, _ := a.TryLock(ctx, 0, 10*time.Second) // fixed 10 s lease, no watchdog
	fmt.Println("a:", ok)
	ok, _ = b.TryLock(ctx, 0, 0) // one attempt, no waiting
	fmt.Println("b:", ok)
	ok, _ = a.TryLock(a.HoldContext(), 0, 0) // re-entry: the hold's context proves it
	n, _ := a.HoldCount(ctx)
	fmt.Println("a again:", ok, "hold count", n)
	_ = a.Unlock(ctx)
	_ = a.Unlock(ctx)
	// Output:
	// a: true
	// b: false
	// a again: true hold count 2
}

// Extend lengthens a fixed lease once, where a watchdog is not wanted.
func ExampleMutex_Extend() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close()
	owner, _ := fairlock.NewOwner(client)   // one per client: its handles share it
	defer owner.Close(context.Background()) // leaves queues, releases holds
	ctx := context.Background()

	m, _ := reentrant.New(owner, "export")
	ok, _ := m.TryLock(ctx, 0, 10*time.Second) // a fixed lease, sized for the usual export
	fmt.Println("held:", ok)

	// This export is a big one: it needs a minute more, asked for once
	// rather than renewed by a watchdog.
	if err := m.Extend(ctx, time.Minute); err != nil {
		fmt.Println("lost:", err)
		return
	}
	ttl, _ := m.TTL(ctx)
	fmt.Println("lease:", ttl.Round(time.Second))
	_ = m.Unlock(ctx)
	// Output:
	// held: true
	// lease: 1m0s
}

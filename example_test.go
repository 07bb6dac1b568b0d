package fairlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/fair"
	"github.com/redis/go-redis/v9"
)

// One owner per client and process, made at start; closing it at the end
// releases what its handles still hold and takes its waiters out of their
// queues, so that the next in line, in any process, goes on at once.
func ExampleOwner_Close() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close() // after the owner
	owner, err := fairlock.NewOwner(client)
	if err != nil {
		panic(err)
	}
	jobs, _ := fair.New(owner, "jobs")
	ctx, err := jobs.LockContext(context.Background())
	if err != nil {
		panic(err)
	}

	// Shutting down: at most 5 s for Redis to confirm.
	stop, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := owner.Close(stop); err != nil {
		fmt.Println("close:", err)
	}
	fmt.Println("hold ended:", errors.Is(context.Cause(ctx), fairlock.ErrClosed))
	held, _ := fair.Inspect(context.Background(), client, "jobs")
	fmt.Println("still held in Redis:", held.Holder != nil)
	fmt.Println("new calls:", errors.Is(jobs.Lock(context.Background()), fairlock.ErrClosed))
	// Output:
	// hold ended: true
	// still held in Redis: false
	// new calls: true
}

package fairlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/observe"
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

// A rolling deploy drains the owner: the job that holds the lock finishes
// and unlocks, a call that would join the queue is refused, and then the
// owner closes.
func ExampleOwner_Drain() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close()
	owner, _ := fairlock.NewOwner(client)
	ctx := context.Background()
	jobs, _ := fair.New(owner, "jobs")
	job, _ := jobs.LockContext(ctx) // a job is running
	drained := make(chan error, 1)
	go func() { drained <- owner.Drain(ctx) }()
	for {
		// The drain has begun once a new acquisition is refused.
		if _, err := jobs.TryLock(ctx, 0, 0); errors.Is(err, fairlock.ErrClosed) {
			fmt.Println("a new Lock while draining:", errors.Is(err, fairlock.ErrClosed))
			break
		}
		time.Sleep(time.Millisecond)
	}
	fmt.Println("the running job's context while draining:", job.Err())
	_ = jobs.Unlock(job) // the job finishes
	fmt.Println("Drain:", <-drained)
	fmt.Println("the job's hold ended by its Unlock:", errors.Is(context.Cause(job), fairlock.ErrReleased))
	// Output:
	// a new Lock while draining: true
	// the running job's context while draining: <nil>
	// Drain: <nil>
	// the job's hold ended by its Unlock: true
}

// An observer hears of every acquisition and hold; the OpenTelemetry and
// Prometheus modules (extra/) are ready-made ones.
func ExampleWithObserver() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close()
	owner, _ := fairlock.NewOwner(client)   // one per client: its handles share it
	defer owner.Close(context.Background()) // leaves queues, releases holds
	ctx := context.Background()

	m, _ := fair.New(owner, "reports", fairlock.WithObserver(waitLogger{}))
	other, _ := fair.New(owner, "reports")
	_ = other.Lock(ctx)
	_, _ = m.TryLock(ctx, 0, 0) // other holds it
	_ = other.Unlock(ctx)
	_ = m.Do(ctx, func(context.Context) error { return nil })
	// Output:
	// fair lock "reports": timed_out, queued false
	// fair lock "reports": acquired, queued false
}

// waitLogger is an observer of its own: it embeds observe.Nop and
// overrides the one method it needs.
type waitLogger struct{ observe.Nop }

func (waitLogger) ObserveAcquisition(_ context.Context, a observe.Acquisition) {
	fmt.Printf("%s lock %q: %s, queued %v\n", a.Primitive, a.Lock, a.Outcome, a.Queued)
}

// WithPresence asks for the presence every owner keeps by default: a
// pub/sub subscription (on Cluster, one per master) kept for the owner's
// life. When its process dies, Redis drops it, and whoever waits
// for a fair lock it held takes the lock within about a quarter of a second
// instead of at the lease's end. If the subscription breaks while the
// process lives, the owner subscribes again and keeps its holds; one it
// cannot confirm within the grace ends (Lost closes) before anyone else can
// take it.
func ExampleWithPresence() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close()
	owner, err := fairlock.NewOwner(client, fairlock.WithPresence())
	if err != nil {
		panic(err)
	}
	defer owner.Close(context.Background())
	leader, _ := fair.New(owner, "scheduler")
	if err := leader.Lock(context.Background()); err != nil {
		panic(err)
	}
	defer leader.Unlock(context.Background())
	fmt.Println("held, with a presence:", leader.Token() > 0)
	// Output:
	// held, with a presence: true
}

// An owner made WithoutPresence keeps no presence: its holds ride out an
// outage of Redis as long as a renewal gets through before their lease runs
// out, and a dead holder's lock moves on only when its lease runs out. For
// deployments where outages are common and crashes rare.
func ExampleWithoutPresence() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close()
	plain, err := fairlock.NewOwner(client, fairlock.WithoutPresence())
	if err != nil {
		panic(err)
	}
	defer plain.Close(context.Background())
	byDefault, err := fairlock.NewOwner(client)
	if err != nil {
		panic(err)
	}
	defer byDefault.Close(context.Background())
	fmt.Println("WithoutPresence keeps one:", plain.KeepsPresence())
	fmt.Println("the default, on a single server, keeps one:", byDefault.KeepsPresence())
	// Output:
	// WithoutPresence keeps one: false
	// the default, on a single server, keeps one: true
}

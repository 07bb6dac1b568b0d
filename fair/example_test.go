package fair_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/fair"
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

	m, err := fair.New(owner, "deploys", fair.WithLabel("deployer"))
	if err != nil {
		panic(err)
	}
	if err := m.Lock(ctx); err != nil { // joins the queue, waits its turn
		panic(err)
	}
	defer m.Unlock(ctx) // hands the lock to the next in line

	fmt.Println("deploying with fencing token", m.Token() > 0)
	// Output: deploying with fencing token true
}

func ExampleInspect() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close()
	owner, _ := fairlock.NewOwner(client)   // one per client: its handles share it
	defer owner.Close(context.Background()) // leaves queues, releases holds
	ctx := context.Background()

	holder, _ := fair.New(owner, "reports", fair.WithLabel("nightly"))
	waiter, _ := fair.New(owner, "reports", fair.WithLabel("ad hoc"))
	_ = holder.Lock(ctx)

	// The waiter gives up after 100 ms; meanwhile it is in the queue.
	done := make(chan bool)
	go func() {
		ok, _ := waiter.TryLock(ctx, 100*time.Millisecond, 0)
		done <- ok
	}()
	for {
		st, _ := fair.Inspect(ctx, client, "reports")
		if len(st.Queue) == 1 {
			fmt.Println("holder:", st.Holder.Label, "count", st.Holder.Count)
			fmt.Println("queued:", st.Queue[0].Label)
			break
		}
		time.Sleep(time.Millisecond)
	}
	fmt.Println("waiter got it:", <-done)
	st, _ := fair.Inspect(ctx, client, "reports")
	fmt.Println("queue after it gave up:", len(st.Queue))
	_ = holder.Unlock(ctx)
	// Output:
	// holder: nightly count 1
	// queued: ad hoc
	// waiter got it: false
	// queue after it gave up: 0
}

// An ordered job runner with at most 2 jobs at a time: jobs start in the
// order their runners asked.
func ExampleSemaphore() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close()
	owner, _ := fairlock.NewOwner(client)   // one per client: its handles share it
	defer owner.Close(context.Background()) // leaves queues, releases holds
	ctx := context.Background()

	s, err := fair.NewSemaphore(owner, "encoders", 2)
	if err != nil {
		panic(err)
	}
	a, _ := s.Acquire(ctx, 1)
	b, _ := s.Acquire(ctx, 1)
	if p, _ := s.TryAcquire(ctx, 1, 0, 0); p == nil {
		fmt.Println("third job waits: both permits in use")
	}
	_ = a.Release(ctx)
	free, _ := s.Available(ctx)
	fmt.Println("free after one release:", free)
	_ = b.Release(ctx)
	// Output:
	// third job waits: both permits in use
	// free after one release: 1
}

// Readers share the lock; a writer waits for them, and readers who come
// after the writer wait for it.
func ExampleRWMutex() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close()
	owner, _ := fairlock.NewOwner(client)   // one per client: its handles share it
	defer owner.Close(context.Background()) // leaves queues, releases holds
	ctx := context.Background()

	reader, _ := fair.NewRWMutex(owner, "catalog")
	other, _ := fair.NewRWMutex(owner, "catalog")
	writer, _ := fair.NewRWMutex(owner, "catalog")
	_ = reader.RLock(ctx)
	_ = other.RLock(ctx)
	ok, _ := writer.TryLock(ctx, 0, 0)
	fmt.Println("writer beside two readers:", ok)
	_ = reader.RUnlock(ctx)
	_ = other.RUnlock(ctx)
	ok, _ = writer.TryLock(ctx, 0, 0)
	fmt.Println("writer once they are gone:", ok)
	_ = writer.Unlock(ctx)
	// Output:
	// writer beside two readers: false
	// writer once they are gone: true
}

// One handle, shared by goroutines: they take turns, each Lock in the
// queue in arrival order; the context LockContext returns re-enters.
func ExampleMutex_LockContext() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close()
	owner, _ := fairlock.NewOwner(client)   // one per client: its handles share it
	defer owner.Close(context.Background()) // leaves queues, releases holds
	jobs, _ := fair.New(owner, "jobs")      // share it

	var inside, most atomic.Int32
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			ctx, err := jobs.LockContext(context.Background())
			if err != nil {
				panic(err)
			}
			defer jobs.Unlock(ctx)
			if n := inside.Add(1); n > most.Load() {
				most.Store(n)
			}
			_ = jobs.Lock(ctx) // a re-entry: ctx carries the hold
			_ = jobs.Unlock(ctx)
			inside.Add(-1)
		})
	}
	wg.Wait()
	fmt.Println("goroutines inside at once, at most:", most.Load())
	// Output: goroutines inside at once, at most: 1
}

// Do runs a function holding the lock, and releases it after.
func ExampleMutex_Do() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close()
	owner, _ := fairlock.NewOwner(client)   // one per client: its handles share it
	defer owner.Close(context.Background()) // leaves queues, releases holds
	reports, _ := fair.New(owner, "reports")

	err := reports.Do(context.Background(), func(ctx context.Context) error {
		// ctx ends if the hold is lost; pass it to the work.
		fmt.Println("held:", ctx.Err() == nil)
		return nil
	})
	held, _ := reports.IsLocked(context.Background())
	fmt.Println(err, held)
	// Output:
	// held: true
	// <nil> false
}

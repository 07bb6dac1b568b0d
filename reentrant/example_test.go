package reentrant_test

import (
	"context"
	"fmt"

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

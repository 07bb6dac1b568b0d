package fairlock_test

import (
	"context"
	"fmt"

	"github.com/alicebob/miniredis/v2"
	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/fair"
	"github.com/redis/go-redis/v9"
)

func ExampleCloseIdleConnections() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	m, _ := fair.New(client, "jobs")
	if err := m.Lock(context.Background()); err == nil {
		fmt.Println("locked")
		_ = m.Unlock(context.Background())
	}
	// Before closing the client: no pub/sub connection is left behind.
	fairlock.CloseIdleConnections()
	_ = client.Close()
	// Output: locked
}

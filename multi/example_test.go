package multi_test

import (
	"context"
	"fmt"

	"github.com/alicebob/miniredis/v2"
	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/multi"
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

	ledger, _ := fair.New(owner, "ledger")
	invoices, _ := fair.New(owner, "invoices")
	both, err := multi.New(ledger, invoices)
	if err != nil {
		panic(err)
	}
	if err := both.Lock(ctx); err != nil { // both, in the global order, or neither
		panic(err)
	}
	defer both.Unlock(ctx)

	fmt.Println("taken in order:", both.Names())
	// Output: taken in order: [invoices ledger]
}

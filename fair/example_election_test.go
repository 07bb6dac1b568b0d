package fair_test

import (
	"context"
	"fmt"

	"github.com/alicebob/miniredis/v2"
	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/fair"
	"github.com/redis/go-redis/v9"
)

// Two schedulers campaign; the first leads until it resigns, and the
// second takes over in the same call to Redis, in a term of its own.
func ExampleElection_Campaign() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	ca := redis.NewClient(&redis.Options{Addr: mr.Addr()}) // two machines
	cb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer ca.Close()
	defer cb.Close()
	a, _ := fairlock.NewOwner(ca) // one owner per client
	b, _ := fairlock.NewOwner(cb)
	defer a.Close(context.Background())
	defer b.Close(context.Background())
	ctx := context.Background()

	ea, _ := fair.NewElection(a, "scheduler")
	eb, _ := fair.NewElection(b, "scheduler")
	leadA, err := ea.Campaign(ctx, "host-a:8080") // free: leads at once
	if err != nil {
		panic(err)
	}
	standby := make(chan context.Context)
	go func() {
		leadB, err := eb.Campaign(ctx, "host-b:8080") // waits its turn
		if err != nil {
			panic(err)
		}
		standby <- leadB
	}()

	l, _ := eb.Leader(ctx)
	fmt.Println("leader:", l.Value)
	_ = ea.Resign(leadA) // hands over at once
	leadB := <-standby
	fmt.Println("a's term ended:", context.Cause(leadA) == fair.ErrResigned)
	fmt.Println("b's term is newer:", eb.Term(leadB) > ea.Term(leadA))
	_ = eb.Resign(leadB)
	// Output:
	// leader: host-a:8080
	// a's term ended: true
	// b's term is newer: true
}

// An observer receives the current leader at once, then every change: here
// a value proclaimed, then nobody once the leader resigned.
func ExampleElection_Observe() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close()
	owner, _ := fairlock.NewOwner(client)
	defer owner.Close(context.Background())
	e, _ := fair.NewElection(owner, "scheduler")

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	lead, _ := e.Campaign(ctx, "host-a:8080")
	leaders := e.Observe(ctx)
	fmt.Printf("%q\n", (<-leaders).Value)
	_ = e.Proclaim(lead, "host-a:9090")
	fmt.Printf("%q\n", (<-leaders).Value)
	_ = e.Resign(lead)
	fmt.Println("nobody:", <-leaders == fair.Leadership{})
	// Output:
	// "host-a:8080"
	// "host-a:9090"
	// nobody: true
}

package core

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
)

// BenchmarkOwnerEnter is what binding an acquisition to its owner's Close
// costs (Owner.enter and its leave): paid once per Lock, TryLock or
// Acquire, beside a round trip to Redis of tens of µs.
func BenchmarkOwnerEnter(b *testing.B) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer client.Close()
	o, err := NewOwnerWith(client, Rig{})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background()) // a caller's ctx that can end
	defer cancel()
	b.ReportAllocs()
	for b.Loop() {
		_, leave, err := o.enter(ctx, true)
		if err != nil {
			b.Fatal(err)
		}
		leave()
	}
}

// An acquisition that enters after Close began is refused, and one in
// flight when it began has its context ended with cause ErrClosed.
func TestEnterAfterCloseIsRefused(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer client.Close()
	o, _ := NewOwnerWith(client, Rig{})
	bound, leave, err := o.enter(context.Background(), true)
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() { closed <- o.Close(context.Background()) }()
	<-bound.Done() // Close waits for the acquisition, which sees its end
	if cause := context.Cause(bound); cause != ErrClosed {
		t.Fatalf("an acquisition in flight ended with %v, want ErrClosed", cause)
	}
	leave()
	if err := <-closed; err != nil {
		t.Fatalf("Close = %v", err)
	}
	if _, _, err := o.enter(context.Background(), true); err != ErrClosed {
		t.Fatalf("enter after Close = %v, want ErrClosed", err)
	}
}

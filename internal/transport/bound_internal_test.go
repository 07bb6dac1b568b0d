package transport

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Which calls this package bounds itself (needsBound): only those whose
// deadline go-redis would not keep, on a client that does not end calls at
// their ctx's end; never a detached clean-up's. And which go-redis ends in
// time for their ctx by itself (EndsInTime), so that a clean-up, which runs
// without its ctx's deadline, may run in its caller's goroutine: no
// deadline, or one farther than go-redis's own bound, on a client that has
// one, whether or not it ends calls at their ctx's deadline.
func TestWhichCallsAreBoundedHere(t *testing.T) {
	def := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	own := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	endless := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ReadTimeout: -1})
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	for _, c := range []redis.UniversalClient{def, own, endless, cluster} {
		t.Cleanup(func() { _ = c.Close() })
	}
	bg := context.Background()
	soon, cancel := context.WithTimeout(bg, 200*time.Millisecond)
	defer cancel()
	late, cancelLate := context.WithTimeout(bg, time.Hour)
	defer cancelLate()
	cancelled, cancelOnly := context.WithCancel(bg)
	defer cancelOnly()
	for _, tc := range []struct {
		what       string
		ctx        context.Context
		c          redis.UniversalClient
		want, ends bool
	}{
		{"a 200 ms deadline, default options", soon, def, true, false},
		{"a 200 ms deadline, default options, Cluster", soon, cluster, true, false},
		{"a 200 ms deadline, ContextTimeoutEnabled", soon, own, false, false},
		{"a deadline an hour away, default options", late, def, false, true},
		{"a deadline an hour away, no read timeout", late, endless, true, false},
		{"no deadline", cancelled, def, false, true},
		{"no deadline, ContextTimeoutEnabled", cancelled, own, false, true},
		{"no deadline, no read timeout", cancelled, endless, false, false},
		{"a detached clean-up", Detached(soon), def, false, false},
	} {
		if got := needsBound(tc.ctx, tc.c); got != tc.want {
			t.Errorf("%s: bounded here = %v, want %v", tc.what, got, tc.want)
		}
		if got := EndsInTime(tc.ctx, tc.c); got != tc.ends {
			t.Errorf("%s: ends in time = %v, want %v", tc.what, got, tc.ends)
		}
	}
	if b := selfBound(def); b < 10*time.Second || b > 10*time.Minute {
		t.Errorf("go-redis's own bound with default options = %v, want the order of its timeouts times its tries", b)
	} else {
		t.Logf("go-redis's own bound of a call with default options, with the margin: %v", b)
	}
}

// A bounded call returns Abandoned, wrapping ctx's error, at ctx's end; its
// Done closes once the call has returned.
func TestBoundedCallIsAbandonedAtItsDeadline(t *testing.T) {
	release := make(chan struct{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	cmd := bounded(ctx, func() *redis.Cmd { <-release; return redis.NewCmd(context.Background()) },
		func(a *Abandoned) *redis.Cmd { return failedCmd(ctx, a) })
	a, ok := cmd.Err().(*Abandoned)
	if !ok || a.Unwrap() != context.DeadlineExceeded {
		t.Fatalf("err = %v, want Abandoned wrapping the deadline", cmd.Err())
	}
	select {
	case <-a.Done:
		t.Fatal("Done closed while the call still runs")
	default:
	}
	close(release)
	wait, cancelWait := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelWait()
	AfterAbandoned(wait, a)
	if wait.Err() != nil {
		t.Fatal("AfterAbandoned returned only at its own deadline")
	}
}

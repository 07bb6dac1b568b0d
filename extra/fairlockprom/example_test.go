package fairlockprom_test

import (
	"context"
	"fmt"

	"github.com/alicebob/miniredis/v2"
	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/extra/fairlockprom"
	"github.com/fairlock/fairlock/fair"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// A Collector is registered once and given to every lock; a service then
// serves the registry with promhttp.Handler as usual. Here the registry is
// read back at once.
func Example() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer func() { _ = client.Close() }()
	owner, _ := fairlock.NewOwner(client)
	defer owner.Close(context.Background())

	c, err := fairlockprom.New()
	if err != nil {
		panic(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	m, err := fair.New(owner, "jobs", fairlock.WithObserver(c))
	if err != nil {
		panic(err)
	}
	if err := m.Do(context.Background(), func(context.Context) error { return nil }); err != nil {
		panic(err)
	}

	fams, _ := reg.Gather()
	for _, f := range fams {
		for _, s := range f.GetMetric() {
			if h := s.GetHistogram(); h != nil {
				fmt.Printf("%s: %d\n", f.GetName(), h.GetSampleCount())
			}
			if c := s.GetCounter(); c != nil && c.GetValue() > 0 { // every counter starts at 0
				fmt.Printf("%s: %v\n", f.GetName(), c.GetValue())
			}
		}
	}
	// Output:
	// fairlock_acquire_duration_seconds: 1
	// fairlock_acquisitions_total: 1
	// fairlock_hold_duration_seconds: 1
}

package reentrant_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/lua"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/internal/transport"
	"github.com/fairlock/fairlock/reentrant"
	"github.com/redis/go-redis/v9"
)

// clientsFor returns n clients of one kind of real Redis.
func TestRealMutualExclusion(t *testing.T) {
	for _, d := range redistest.Deployments {
		t.Run(string(d), func(t *testing.T) {
			redistest.NoLeaks(t)
			name := redistest.Name(t)
			redistest.MutualExclusion(t, redistest.Clients(t, d, 4), 16, 2000,
				func(c redis.UniversalClient) (redistest.Locker, error) {
					return reentrant.New(redistest.Owner(c), name)
				})
		})
	}
}

// Goroutines that share a handle exclude each other: 16 goroutines, four
// to each of four handles (one per client), under -race.
func TestRealGoroutinesSharingAHandleExcludeEachOther(t *testing.T) {
	for _, d := range redistest.Deployments {
		t.Run(string(d), func(t *testing.T) {
			redistest.NoLeaks(t)
			name := redistest.Name(t)
			shared := map[redis.UniversalClient]*reentrant.Mutex{}
			redistest.MutualExclusion(t, redistest.Clients(t, d, 4), 16, 1000,
				func(c redis.UniversalClient) (redistest.Locker, error) {
					if m := shared[c]; m != nil {
						return m, nil
					}
					m, err := reentrant.New(redistest.Owner(c), name)
					shared[c] = m
					return m, err
				})
		})
	}
}

// With the fallback timer far away, only the release message can wake the
// waiter: it must come back promptly, having called Redis at most twice.
func TestRealWaiterWakesOnUnlockWithoutPolling(t *testing.T) {
	for _, d := range redistest.Deployments {
		name := string(d)
		t.Run(name, func(t *testing.T) {
			redistest.NoLeaks(t)
			clients := redistest.Clients(t, d, 2)
			counter := &redistest.ScriptCounter{}
			clients[1].AddHook(counter)
			lock := redistest.Name(t)
			a, _ := reentrant.New(redistest.Owner(clients[0]), lock, fairlock.WithLease(time.Minute))
			b, _ := reentrant.New(redistest.Owner(clients[1]), lock)
			ctx := context.Background()
			if err := a.Lock(ctx); err != nil {
				t.Fatal(err)
			}
			// Load the scripts on the server, then count only the wait.
			if ok, _ := b.TryLock(ctx, 0, 0); ok {
				t.Fatal("b took a held lock")
			}
			counter.Scripts.Store(0)
			done := make(chan time.Time, 1)
			go func() {
				if err := b.Lock(ctx); err != nil {
					t.Error(err)
				}
				done <- time.Now()
			}()
			time.Sleep(300 * time.Millisecond) // let b subscribe and fall asleep
			if n := counter.Scripts.Load(); n != 2 {
				t.Fatalf("b made %d script calls before sleeping, want 2 (try, subscribe, try again)", n)
			}
			released := time.Now()
			if err := a.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			select {
			case at := <-done:
				if d := at.Sub(released); d > 200*time.Millisecond {
					t.Fatalf("waiter returned %v after Unlock, want within 200ms", d)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("waiter not woken by Unlock")
			}
			if n := counter.Scripts.Load(); n > 3 {
				t.Fatalf("waiter made %d script calls in all, want at most 3 (2 while waiting, 1 to acquire)", n)
			}
			if err := b.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Each release wakes one waiter, the longest-waiting live one, not every
// waiting client: 16 clients (as if on 16 machines) take one lock in turn,
// and the script calls per acquisition stay those of one try that waits,
// one that takes the lock, the release, and now and then a woken waiter
// beaten to the lock (this lock is not fair). When every release woke
// every waiting client, it was one more try per waiting client: about 17.
func TestRealOneReleaseWakesOneWaiter(t *testing.T) {
	for _, d := range redistest.Deployments {
		t.Run(string(d), func(t *testing.T) {
			redistest.NoLeaks(t)
			const clients, total = 16, 320
			name := redistest.Name(t)
			counter := &redistest.ScriptCounter{}
			var (
				mu   sync.Mutex
				took int
				wg   sync.WaitGroup
			)
			ctx := context.Background()
			for _, c := range redistest.Clients(t, d, clients) {
				c.AddHook(counter)
				m, err := reentrant.New(redistest.Owner(c), name)
				if err != nil {
					t.Fatal(err)
				}
				wg.Go(func() {
					for {
						if err := m.Lock(ctx); err != nil {
							t.Error(err)
							return
						}
						mu.Lock()
						took++
						done := took >= total
						mu.Unlock()
						if err := m.Unlock(ctx); err != nil {
							t.Error(err)
							return
						}
						if done {
							return
						}
					}
				})
			}
			wg.Wait()
			per := float64(counter.Scripts.Load()) / float64(took)
			t.Logf("%d clients: %.2f script calls per acquisition", clients, per)
			if per > 6 {
				t.Fatalf("%.2f script calls per acquisition with %d clients waiting, want at most 6: releases wake more than one waiter", per, clients)
			}
		})
	}
}

func BenchmarkUncontendedLockUnlock(b *testing.B) {
	client := redistest.Real(b)
	m, err := reentrant.New(redistest.Owner(client), redistest.Name(b))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := m.Lock(ctx); err != nil {
			b.Fatal(err)
		}
		if err := m.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkUncontendedSteps takes an uncontended Lock+Unlock pair apart, on
// one client: the floor (two trivial scripts: SET NX PX, and a
// compare-and-delete), the reentrant lock's own two scripts called directly
// (their Redis time, arguments and replies, without the library around
// them), TryLock with a fixed lease (no watchdog) with Unlock, and Lock with
// Unlock. With -count, the four run in turn, count times:
//
//	go test -run '^$' -bench UncontendedSteps -benchtime 2s -count 5 ./reentrant/
func BenchmarkUncontendedSteps(b *testing.B) {
	client := redistest.Real(b)
	ctx := context.Background()
	name := redistest.Name(b)
	b.Run("floor", func(b *testing.B) {
		acquire := redis.NewScript(`return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) and 1 or 0`)
		release := redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)
		keys := []string{"floor:{" + name + "}"}
		b.ReportAllocs()
		for b.Loop() {
			if err := acquire.Run(ctx, client, keys, "token", 30000).Err(); err != nil {
				b.Fatal(err)
			}
			if err := release.Run(ctx, client, keys, "token").Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("scripts", func(b *testing.B) {
		scripts, mode := lua.Default(), &transport.Mode{}
		base := transport.ReentrantKey(name + "-scripts")
		keys, channel := transport.QueueKeys(base), transport.Channel(base)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			i++
			req := "c.h#" + strconv.Itoa(i)
			v, err := scripts.ReentrantAcquire.Run(ctx, client, mode, keys, "c.h", req, 30000, 0).Slice()
			if err != nil || len(v) < 2 {
				b.Fatalf("acquire: %v, %v", v, err)
			}
			if err := scripts.ReentrantRelease.Run(ctx, client, mode, keys, "c.h", req+"r", v[1], "PUBLISH", channel).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, fixed := range []bool{true, false} {
		sub := map[bool]string{true: "TryLock-fixed-lease", false: "Lock"}[fixed]
		b.Run(sub, func(b *testing.B) {
			m, err := reentrant.New(redistest.Owner(client), name+"-"+sub)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if fixed {
					if ok, err := m.TryLock(ctx, 0, 30*time.Second); !ok || err != nil {
						b.Fatalf("TryLock: %v, %v", ok, err)
					}
				} else if err := m.Lock(ctx); err != nil {
					b.Fatal(err)
				}
				if err := m.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// Holds that end by their lease, with nobody unlocking: every waiter's own
// fallback timer fires when the current hold would expire, so one of them
// takes the lock right after each lease (in no particular order: this lock
// is not fair).
func TestRealHoldsEndingByLeasePassTheLockOn(t *testing.T) {
	redistest.HoldsEndingByLease(t, false, func(c redis.UniversalClient, name string, _ int, lease time.Duration) (redistest.TurnLocker, error) {
		if lease > 0 {
			return reentrant.New(redistest.Owner(c), name, fairlock.WithLease(lease))
		}
		return reentrant.New(redistest.Owner(c), name)
	})
}

package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/redis/go-redis/v9"
)

// Scenario 6: the history check. A concurrent run through the proxy, with
// cut connections and holds that outlive their fixed lease, records each
// hold as the client believed it: acquired when Lock returned, over when
// Unlock was called or Lost() closed. porcupine then checks that history
// against a mutex whose tokens only grow: an acquisition only while free,
// with a token above every earlier one, an end only of the current hold.

// mutexIn is an operation's input: an acquisition by a client, or the end
// of the hold with token.
type mutexIn struct {
	acquire bool
	client  int
	token   int64
}

type mutexState struct {
	held        bool
	token, last int64
}

var mutexModel = porcupine.Model{
	Init: func() any { return mutexState{} },
	Step: func(state, input, _ any) (bool, any) {
		s, in := state.(mutexState), input.(mutexIn)
		if in.acquire {
			if s.held || in.token <= s.last {
				return false, s
			}
			return true, mutexState{held: true, token: in.token, last: in.token}
		}
		if !s.held || s.token != in.token {
			return false, s
		}
		return true, mutexState{last: s.last}
	},
	DescribeOperation: func(input, _ any) string {
		in := input.(mutexIn)
		if in.acquire {
			return fmt.Sprintf("c%d acquires %d", in.client, in.token)
		}
		return fmt.Sprintf("end of %d", in.token)
	},
}

// history records operations, with times relative to its start.
type history struct {
	start time.Time
	mu    sync.Mutex
	ops   []porcupine.Operation
}

func newHistory() *history { return &history{start: time.Now()} }

func (h *history) since(t time.Time) int64 { return int64(t.Sub(h.start)) }

func (h *history) acquired(client int, token int64, call, ret time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: mutexIn{acquire: true, client: client, token: token},
		Call: h.since(call), Return: h.since(ret)})
}

// ended records the end of a hold as its client saw it: an instant.
func (h *history) ended(client int, token int64, at time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: mutexIn{token: token},
		Call: h.since(at), Return: h.since(at)})
}

func (h *history) check(t *testing.T) porcupine.CheckResult {
	h.mu.Lock()
	defer h.mu.Unlock()
	return porcupine.CheckOperationsTimeout(mutexModel, h.ops, time.Minute)
}

// TestHistoryIsLinearizable runs both locks under cuts and expiries.
func TestHistoryIsLinearizable(t *testing.T) {
	const (
		clients = 6
		runFor  = 4 * time.Second
		lease   = 300 * time.Millisecond // the fixed lease of some holds
	)
	for _, lock := range []string{"fair", "reentrant"} {
		t.Run(lock, func(t *testing.T) {
			srv := sharedServer(t)
			p, err := NewProxy(srv.Addr)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			name := lockName(t)
			h := newHistory()
			stop := time.Now().Add(runFor)
			var wg sync.WaitGroup
			var mu sync.Mutex
			holds, losses, failures := 0, 0, 0
			for i := range clients {
				c := redis.NewClient(&redis.Options{Addr: p.Addr()})
				defer c.Close()
				loss := new(lossClock)
				m := newHandle(t, lock, c, name, time.Second, loss.option())
				wg.Add(1)
				go func() {
					defer wg.Done()
					for time.Now().Before(stop) {
						fixed := rand.IntN(3) == 0
						call := time.Now()
						ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
						var ok bool
						var err error
						if fixed {
							ok, err = m.TryLock(ctx, 10*time.Second, lease)
						} else {
							err = m.Lock(ctx)
							ok = err == nil
						}
						cancel()
						ret := time.Now()
						if err != nil || !ok {
							mu.Lock()
							failures++
							mu.Unlock()
							continue
						}
						token := m.Token()
						h.acquired(i, token, call, ret)
						hold := time.Duration(rand.IntN(20)) * time.Millisecond
						if fixed && rand.IntN(4) == 0 {
							hold = 2 * lease // outlives its lease: the hold is lost
						}
						var end time.Time
						lost := false
						select {
						case <-m.Lost():
							end, lost = time.Now(), true
							// The library's loss, logged before Lost closed:
							// this goroutine may wake tens of ms later on a
							// loaded machine (lossClock).
							if at, ok := loss.take(); ok && at.After(call) && at.Before(end) {
								end = at
							}
						case <-time.After(hold):
							end = time.Now()
						}
						h.ended(i, token, end)
						_ = m.Unlock(context.Background()) // ErrLockLost after a loss
						loss.take()                        // a loss Unlock found is not the next hold's
						mu.Lock()
						holds++
						if lost {
							losses++
						}
						mu.Unlock()
					}
				}()
			}
			cuts := 0
			for time.Now().Before(stop) {
				time.Sleep(time.Duration(100+rand.IntN(200)) * time.Millisecond)
				if p.CutOne() {
					cuts++
				}
			}
			wg.Wait()
			res := h.check(t)
			t.Logf("%s: %d holds (%d lost by their fixed lease), %d failed calls, %d connections cut: porcupine says %s",
				lock, holds, losses, failures, cuts, res)
			if res != porcupine.Ok {
				t.Errorf("the history of %d holds is not linearizable against a mutex with growing tokens: %s", holds, res)
			}
			if losses == 0 {
				t.Error("no hold outlived its lease: the run did not test expiries")
			}
		})
	}
}

// The checker is not vacuous: a lock whose release deletes the key without
// checking the owner (SET NX PX, then DEL) lets a holder whose lease ran out
// delete its successor's hold, and a third client takes the lock while the
// successor still holds it. porcupine must reject that history.
func TestHistoryCheckRejectsABrokenLock(t *testing.T) {
	srv := sharedServer(t)
	c := client(t, srv.Addr)
	key := "broken:{" + lockName(t) + "}"
	const lease = 100 * time.Millisecond
	h := newHistory()
	var token int64
	var tokenMu sync.Mutex
	// acquire spins on SET NX PX; the client believes its hold until the
	// lease it counts from the send runs out, or until it releases.
	acquire := func(client int) (int64, time.Time) {
		call := time.Now()
		for {
			tokenMu.Lock()
			token++
			tok := token
			tokenMu.Unlock()
			sent := time.Now()
			ok, err := c.SetNX(context.Background(), key, tok, lease).Result()
			if err != nil {
				t.Error(err)
				return 0, time.Time{}
			}
			if ok {
				h.acquired(client, tok, call, time.Now())
				return tok, sent.Add(lease - 5*time.Millisecond)
			}
			time.Sleep(time.Millisecond)
		}
	}
	release := func(client int, tok int64, believedUntil time.Time) {
		end := time.Now()
		if end.After(believedUntil) {
			end = believedUntil // it stopped believing when its lease ran out
		}
		h.ended(client, tok, end)
		c.Del(context.Background(), key) // the bug: no owner check
	}
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { // A outlives its lease, then deletes B's hold
		defer wg.Done()
		tok, until := acquire(0)
		time.Sleep(lease + lease/2)
		release(0, tok, until)
	}()
	go func() { // B takes over when A's lease runs out, and holds on
		defer wg.Done()
		time.Sleep(lease / 4)
		tok, until := acquire(1)
		time.Sleep(lease * 3 / 4)
		release(1, tok, until)
	}()
	go func() { // C takes the lock after A's DEL, while B still holds it
		defer wg.Done()
		time.Sleep(lease + lease/4)
		tok, until := acquire(2)
		release(2, tok, until)
	}()
	wg.Wait()
	if res := h.check(t); res != porcupine.Illegal {
		t.Fatalf("porcupine says %s for a lock that let two clients hold at once; want Illegal", res)
	}
}

package faults

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/reentrant"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// The soak worker: "soak <lock> <lock addr> <resource addr> <name> <count>
// <label>". Its 8 handles, each on its own client (as if on its own
// machine), take the lock through the proxy until the process made count
// acquisitions. Inside each hold a handle does a fenced, non-atomic
// read-modify-write on the resource (direct, not through the proxy): it
// reads a counter, then a script writes counter+1 only if the hold's token
// is not lower than the last accepted one. Lost updates would show a
// broken mutual exclusion; rejected writes show fencing at work.
//
// It prints one JSON line per Lock call (a soakCall), then "done " and a
// soakSummary.

const soakHandles = 8

type soakCall struct {
	Label string `json:"l"`
	Start int64  `json:"s"` // unix nanos, before Lock
	End   int64  `json:"e"` // after Lock returned
	Token int64  `json:"t"` // 0 if Lock failed
	Err   string `json:"err,omitempty"`
	Write int    `json:"w"` // 1 accepted, 0 rejected (stale), -1 failed
	// Lost says how a hold ended without its Unlock: "lost" when Lost()
	// had closed by the end of the hold, "unlock" when Unlock returned
	// ErrLockLost.
	Lost string `json:"lost,omitempty"`
}

type soakSummary struct {
	Calls, Acquired, Errors, Accepted, Rejected, Lost int
	// Rescues: waits that learned of their turn from a fallback, their
	// message lost to a cut (allowed here; none without faults).
	Rescues int
	Leaks   string
}

// fence is the resource's fenced write. KEYS: counter, last accepted
// token, log of accepted tokens. ARGV: the value read, the token.
var fence = redis.NewScript(`
local last = tonumber(redis.call('GET', KEYS[2]) or '0')
local token = tonumber(ARGV[2])
if token < last then return 0 end
redis.call('SET', KEYS[1], tonumber(ARGV[1]) + 1)
redis.call('SET', KEYS[2], ARGV[2])
redis.call('RPUSH', KEYS[3], ARGV[2])
return 1
`)

func soakKeys(name string) []string {
	return []string{"soak:{" + name + "}:counter", "soak:{" + name + "}:fence", "soak:{" + name + "}:log"}
}

func runSoakWorker(f []string) int {
	if len(f) != 7 {
		fmt.Fprintln(os.Stderr, "bad soak spec:", f)
		return 2
	}
	lock, lockAddr, resAddr, name, label := f[1], f[2], f[3], f[4], f[6]
	count, _ := strconv.Atoi(f[5])
	go func() { // the test is gone: so is the worker
		buf := make([]byte, 1)
		for {
			if _, err := os.Stdin.Read(buf); err != nil {
				os.Exit(0)
			}
		}
	}()
	leakBase := goleak.IgnoreCurrent()
	res := redis.NewClient(&redis.Options{Addr: resAddr})
	var (
		outMu sync.Mutex
		enc   = json.NewEncoder(os.Stdout)
		left  atomic.Int64
		sum   soakSummary
	)
	left.Store(int64(count))
	var rescues redistest.Rescues
	var wg sync.WaitGroup
	for i := range soakHandles {
		c := redis.NewClient(&redis.Options{Addr: lockAddr})
		hl := fmt.Sprintf("%s-h%d", label, i)
		var m handle
		var err error
		if lock == "fair" {
			m, err = fair.New(redistest.Owner(c), name, fair.WithLabel(hl), fairlock.WithLease(2*time.Second), fairlock.WithObserver(&rescues))
		} else {
			m, err = reentrant.New(redistest.Owner(c), name, fairlock.WithLease(2*time.Second), fairlock.WithObserver(&rescues))
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			for left.Add(-1) >= 0 {
				call := soakCall{Label: hl, Start: time.Now().UnixNano()}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				err := m.Lock(ctx)
				cancel()
				call.End = time.Now().UnixNano()
				if err != nil {
					call.Err = err.Error()
					left.Add(1) // not an acquisition: try again
				} else {
					call.Token = m.Token()
					call.Write = soakWrite(res, name, call.Token)
					select {
					case <-m.Lost():
						call.Lost = "lost"
					default:
						if err := m.Unlock(context.Background()); errors.Is(err, fairlock.ErrLockLost) {
							call.Lost = "unlock"
						}
					}
					if call.Lost == "lost" {
						_ = m.Unlock(context.Background()) // ErrLockLost: forgets the hold
					}
				}
				outMu.Lock()
				sum.Calls++
				switch {
				case call.Err != "":
					sum.Errors++
				default:
					sum.Acquired++
				}
				switch call.Write {
				case 1:
					sum.Accepted++
				case 0:
					sum.Rejected++
				}
				if call.Lost != "" {
					sum.Lost++
				}
				_ = enc.Encode(call)
				outMu.Unlock()
			}
		}()
	}
	wg.Wait()
	sum.Rescues = rescues.Count()
	_ = res.Close()
	redistest.CloseOwners()
	if err := goleak.Find(leakBase); err != nil {
		sum.Leaks = strings.ReplaceAll(err.Error(), "\n", " | ")
	}
	b, _ := json.Marshal(sum)
	fmt.Printf("done %s\n", b)
	return 0
}

// soakWrite is the fenced read-modify-write: 1 accepted, 0 rejected as
// stale, -1 failed.
func soakWrite(res *redis.Client, name string, token int64) int {
	ctx := context.Background()
	keys := soakKeys(name)
	v, err := res.Get(ctx, keys[0]).Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		return -1
	}
	time.Sleep(200 * time.Microsecond) // widen the window a broken lock would show
	n, err := fence.Run(ctx, res, keys, v, token).Int()
	if err != nil {
		return -1
	}
	return n
}

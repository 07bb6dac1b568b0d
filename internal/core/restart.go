package core

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Redis restarted without persistence (or a failover to a replica that
// had not received a write) loses every key: a holder's lock may be taken
// at once by a waiter, while the holder, making no call until its next
// renewal (a third of the lease), goes on believing it holds it. So while
// an owner holds anything, it reads its servers' run_id (INFO server) every
// RestartCheck; when one changed, each hold its watchdog keeps is renewed
// at once, which finds the keys gone and ends the hold as lost
// (ErrLockLost), with the restart as the log's reason. Fixed leases and
// hand-offs not yet claimed are not renewed early: they end by their own
// timers. The first run_id is read one period after the owner's first hold;
// a restart before that is found by the watchdog alone.

// DefaultRestartCheck is how often an owner that holds anything reads its
// servers' run_id.
const DefaultRestartCheck = 500 * time.Millisecond

// restartGone is why a hold ended when a restart's check found it gone.
const restartGone = "Redis restarted (its run_id changed) and the lock's keys are gone"

// watchRestartsLocked starts the check, if it is not running; o.mu held.
func (o *Owner) watchRestartsLocked() {
	if o.restartEvery <= 0 || o.restartTimer != nil || o.closed.Load() {
		return
	}
	o.restartTimer = o.clock.AfterFunc(o.restartEvery, o.checkRestart)
}

// checkRestart is one round of the check: it reads the run_ids, renews the
// holds at once if one changed, and goes on while o holds anything.
func (o *Owner) checkRestart() {
	o.mu.Lock()
	if len(o.holds) == 0 || o.closed.Load() {
		o.restartTimer = nil
		o.mu.Unlock()
		return
	}
	o.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), o.restartEvery)
	restarted := o.runIDsChanged(ctx)
	cancel()
	if restarted {
		o.mu.Lock()
		holds := make([]*hold, 0, len(o.holds))
		for h := range o.holds {
			holds = append(holds, h)
		}
		o.mu.Unlock()
		for _, h := range holds { // not under o.mu: a hold that ends untracks itself
			h.recheck(restartGone)
		}
	}
	o.mu.Lock()
	if len(o.holds) == 0 || o.closed.Load() {
		o.restartTimer = nil
	} else {
		o.restartTimer = o.clock.AfterFunc(o.restartEvery, o.checkRestart)
	}
	o.mu.Unlock()
}

// stopRestartCheck stops the check (Close).
func (o *Owner) stopRestartCheck() {
	o.mu.Lock()
	if o.restartTimer != nil {
		o.restartTimer.Stop()
		o.restartTimer = nil
	}
	o.mu.Unlock()
}

// runIDsChanged reads the run_id of o's server, or of each Cluster master,
// and reports whether one it knew changed. A server that does not answer is
// skipped: its run_id is compared when it answers again. Only the check's
// goroutine calls it.
func (o *Owner) runIDsChanged(ctx context.Context) bool {
	ids := map[string]string{}
	if cc, ok := o.client.(*redis.ClusterClient); ok {
		var mu sync.Mutex
		_ = cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			if id := runID(ctx, node); id != "" {
				mu.Lock()
				ids[node.Options().Addr] = id
				mu.Unlock()
			}
			return nil
		})
	} else if id := runID(ctx, o.client); id != "" {
		ids[""] = id
	}
	if o.runIDs == nil {
		o.runIDs = map[string]string{}
	}
	changed := false
	for node, id := range ids {
		if old, ok := o.runIDs[node]; ok && old != id {
			changed = true
		}
		o.runIDs[node] = id
	}
	return changed
}

// runID is the run_id in c's INFO server, "" if it cannot be read.
func runID(ctx context.Context, c redis.Cmdable) string {
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return ""
	}
	for line := range strings.SplitSeq(info, "\n") {
		if id, ok := strings.CutPrefix(line, "run_id:"); ok {
			return strings.TrimSpace(id)
		}
	}
	return ""
}

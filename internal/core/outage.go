package core

import (
	"errors"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Backoff of a waiter that cannot reach Redis: from MinPause, doubling up
// to MaxPause, each pause jittered by up to a half.
const (
	MinPause = 10 * time.Millisecond
	MaxPause = time.Second
)

// Backoff returns the next pause level after last (0: the first), and the
// jittered pause to wait at that level.
func Backoff(last time.Duration) (level, pause time.Duration) {
	level = min(max(2*last, MinPause), MaxPause)
	return level, level/2 + rand.N(level/2+1)
}

// Transient reports whether err is about reaching Redis (the network, a
// server loading or failing over), not an answer a retry would repeat.
func Transient(err error) bool {
	if err == nil {
		return false
	}
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return true // no reply: the network, a closed connection, a timeout
	}
	msg := rerr.Error()
	for _, p := range []string{"LOADING", "READONLY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

package fairlock_test

import (
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"pgregory.net/rapid"
)

// miniLog keeps what a miniredis subscriber receives on the channels that
// match a pattern, for a specification that checks what each step
// published.
type miniLog struct {
	mr    *miniredis.Miniredis
	sub   *miniredis.Subscriber
	msgs  chan miniredis.PubsubPmessage
	mark  string // a channel that matches the pattern, for the markers
	marks int
	stop  chan struct{}
	done  chan struct{}
}

// newMiniLog subscribes to pattern; markers go to mark, which it must
// match. Close it when the check ends.
func newMiniLog(mr *miniredis.Miniredis, pattern, mark string) *miniLog {
	l := &miniLog{mr: mr, sub: mr.NewSubscriber(), msgs: make(chan miniredis.PubsubPmessage, 64), mark: mark,
		stop: make(chan struct{}), done: make(chan struct{})}
	l.sub.Psubscribe(pattern)
	go func() {
		defer close(l.done)
		for {
			select {
			case m := <-l.sub.Pmessages():
				l.msgs <- m
			case <-l.stop:
				return
			}
		}
	}()
	return l
}

// take returns the messages published since the last take, in order: a
// marker published after them tells when all have been read (a
// subscriber gets them in the order they were published).
func (l *miniLog) take(t *rapid.T) []miniredis.PubsubPmessage {
	l.marks++
	mark := fmt.Sprintf("mark-%d", l.marks)
	go l.mr.Publish(l.mark, mark)
	var got []miniredis.PubsubPmessage
	for {
		select {
		case m := <-l.msgs:
			if m.Message == mark {
				return got
			}
			got = append(got, m)
		case <-time.After(10 * time.Second):
			t.Fatalf("the marker never came back")
		}
	}
}

func (l *miniLog) close() {
	close(l.stop)
	<-l.done
	l.sub.Close()
}

// pickWhere draws one of all for which ok holds, and skips the step
// (what names it) when there is none.
func pickWhere[T any](t *rapid.T, all []T, ok func(T) bool, what string) T {
	var cands []T
	for _, v := range all {
		if ok(v) {
			cands = append(cands, v)
		}
	}
	if len(cands) == 0 {
		t.Skipf("no %s for this step", what)
	}
	return rapid.SampledFrom(cands).Draw(t, what)
}

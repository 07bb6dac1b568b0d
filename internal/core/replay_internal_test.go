package core

import (
	"testing"
	"time"
)

// A slot's ring keeps its latest exits, the oldest first.
func TestRingKeepsTheLatestExits(t *testing.T) {
	var r ring
	t0 := time.Unix(1000, 0)
	if xs := r.since(t0); len(xs) != 0 {
		t.Fatalf("empty ring: %v", xs)
	}
	for i := range replayPerSlot + 5 {
		r.add(stamped{at: t0.Add(time.Duration(i) * time.Second), token: int64(i)})
	}
	xs := r.since(t0)
	if len(xs) != replayPerSlot {
		t.Fatalf("got %d exits; want the last %d", len(xs), replayPerSlot)
	}
	for i, x := range xs {
		if want := int64(5 + i); x.token != want {
			t.Fatalf("exit %d is %d; want %d (the oldest first)", i, x.token, want)
		}
	}
	last := t0.Add(time.Duration(replayPerSlot+4) * time.Second)
	if xs := r.since(last); len(xs) != 1 || xs[0].token != int64(replayPerSlot+4) {
		t.Fatalf("since the latest: %v", xs)
	}
	if xs := r.since(last.Add(time.Nanosecond)); len(xs) != 0 {
		t.Fatalf("since after the latest: %v", xs)
	}
}

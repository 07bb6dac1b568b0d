package core

import (
	"testing"
	"time"
)

// A slot's ring keeps its latest exits, the oldest first, and says whether
// the latest of all is among those asked for (a replay leaves out the entry
// a turn uses now).
func TestRingKeepsTheLatestExits(t *testing.T) {
	var r ring
	t0 := time.Unix(1000, 0)
	if xs, latest := r.since(t0); len(xs) != 0 || latest {
		t.Fatalf("empty ring: %v, %v", xs, latest)
	}
	for i := range replayPerSlot + 5 {
		r.add(stamped{at: t0.Add(time.Duration(i) * time.Second), token: int64(i)})
	}
	xs, latest := r.since(t0)
	if len(xs) != replayPerSlot || !latest {
		t.Fatalf("got %d exits (latest %v); want the last %d, the latest among them", len(xs), latest, replayPerSlot)
	}
	for i, x := range xs {
		if want := int64(5 + i); x.token != want {
			t.Fatalf("exit %d is %d; want %d (the oldest first)", i, x.token, want)
		}
	}
	last := t0.Add(time.Duration(replayPerSlot+4) * time.Second)
	if xs, latest := r.since(last); len(xs) != 1 || !latest || xs[0].token != int64(replayPerSlot+4) {
		t.Fatalf("since the latest: %v, %v", xs, latest)
	}
	if xs, latest := r.since(last.Add(time.Nanosecond)); len(xs) != 0 || latest {
		t.Fatalf("since after the latest: %v, %v", xs, latest)
	}
}

package transport

import (
	"fmt"
	"strconv"
	"time"
)

// The scripts' arguments, in ARGV order, and their replies, as each
// script's file documents them. What a handle sends on every call comes
// boxed (any): a call allocates only for what changes.

// FairAcquire is fair_acquire.lua's ARGV: one attempt of a fair waiter.
type FairAcquire struct {
	Owner, Entry, Request any
	Lease, Wait           any    // ms
	Mode                  string // ModeTry, ModeJoin or ModeQueued
	Origin                any    // EncodeOrigin's text, as EscapeJSON escapes it
	Publish, Channel      any
	Stale                 int64 // the token of this hold id's latest hold that ended, lost or released (0: none), or AnyStale
	// On a semaphore's gate, what the waiter asks for: the hold id of its
	// permit hold, the permits and their lease (ms). Empty elsewhere.
	Permit PermitRequest
	// In an election, the candidate's value, escaped (EscapeValue); nil
	// elsewhere.
	Value any
}

// PermitRequest is what a semaphore's waiter asks for as it queues on the
// gate.
type PermitRequest struct {
	Owner string // the permit hold's hold id; "": no request
	N     int
	Lease int64 // ms
}

// AnyStale, as an acquiring request's stale token, calls every hold of the
// caller's hold id stale (fair_acquire.lua, reentrant_acquire.lua): the
// request of an acquisition that is not a re-entry.
const AnyStale int64 = -1

// Args is a's ARGV: the uncontended path's words (owner, request, lease,
// origin), then in one word what only the general path reads, "<entry>
// <wait> <mode> <stale> <publish> <channel>" (a word costs Redis about as
// much as a field takes to parse; the channel last: a name may hold
// spaces), then a gate's permit request or a candidate's value.
func (a FairAcquire) Args() []any {
	b := make([]byte, 0, 256) // on the stack, for all but long names: the string is the one allocation
	b = number(text(word(word(b, a.Entry), a.Wait), a.Mode), a.Stale)
	rest := string(word(word(b, a.Publish), a.Channel)[1:])
	if a.Value != nil {
		return []any{a.Owner, a.Request, a.Lease, a.Origin, rest, "", 0, 0, a.Value}
	}
	if a.Permit.Owner == "" {
		return []any{a.Owner, a.Request, a.Lease, a.Origin, rest}
	}
	return []any{a.Owner, a.Request, a.Lease, a.Origin, rest, a.Permit.Owner, a.Permit.N, a.Permit.Lease}
}

// word appends v (a string or a number, boxed) to b as one more word of a
// space-separated argument: a space, then v. The caller drops the first
// space, so that an empty word keeps its place.
func word(b []byte, v any) []byte {
	switch v := v.(type) {
	case string:
		return text(b, v)
	case int64:
		return number(b, v)
	case int:
		return number(b, int64(v))
	}
	return text(b, fmt.Sprint(v))
}

// text appends the word v to b (word).
func text(b []byte, v string) []byte { return append(append(b, ' '), v...) }

// number appends the word v to b (word).
func number(b []byte, v int64) []byte { return strconv.AppendInt(append(b, ' '), v, 10) }

// FairAcquireReply is fair_acquire.lua's reply.
type FairAcquireReply struct {
	Held     bool
	Token    int64
	Handoff  bool  // held by a hand-off to this entry, not yet claimed
	Granted  int64 // Handoff: the grant's Redis time, ms
	Evicted  bool  // the entry lost its place
	HoldMs   int64 // waiting: ms until the current hold expires (until the entry should look again)
	Head     bool  // waiting: the entry is the live head (or the first whose client is there behind one whose client is gone)
	Now      int64 // waiting: Redis's clock, ms
	Queue    int   // waiting in the queue: its length, the caller included (0 for a try)
	Settling bool  // a try met a server that lost its data settling (hold.lua's settling), for HoldMs
	// Sent and Read are this client's clock when the request was sent
	// and when the reply was read: the caller's to set.
	Sent, Read time.Time
}

// DecodeFairAcquire reads token (a fresh acquisition of a free lock, as
// {1, token, 0}), {1, token, 0}, {1, token, 1, g},
// {0, hold ms, head, now, queue length} ({0, hold ms, 0, now} for a try,
// {0, hold ms, 0, now, 0, 1} for one that met a settling server) or {-1}.
func DecodeFairAcquire(v any) (FairAcquireReply, error) {
	if token, ok := v.(int64); ok && token > 0 {
		return FairAcquireReply{Held: true, Token: token}, nil
	}
	r, err := ints(v, 1, "fair_acquire")
	if err != nil {
		return FairAcquireReply{}, err
	}
	switch {
	case r[0] == 1 && len(r) >= 4 && r[2] == 1:
		return FairAcquireReply{Held: true, Token: r[1], Handoff: true, Granted: r[3]}, nil
	case r[0] == 1 && len(r) >= 2:
		return FairAcquireReply{Held: true, Token: r[1]}, nil
	case r[0] == -1:
		return FairAcquireReply{Evicted: true}, nil
	case r[0] == 0 && len(r) >= 5:
		return FairAcquireReply{HoldMs: r[1], Head: r[2] == 1, Now: r[3], Queue: int(r[4]), Settling: len(r) >= 6 && r[5] == 1}, nil
	case r[0] == 0 && len(r) >= 4:
		return FairAcquireReply{HoldMs: r[1], Head: r[2] == 1, Now: r[3]}, nil
	}
	return FairAcquireReply{}, fmt.Errorf("fairlock: unexpected fair_acquire reply %v", r)
}

// ReentrantAcquire is reentrant_acquire.lua's ARGV.
type ReentrantAcquire struct {
	Owner, Request any
	Lease          any // ms
	Stale          int64
	// Waiter, for a caller that waits: its waiter id, fresh per call, put
	// among the lock's waiters by a try that finds it held (deadline Wait
	// ms away), taken out by one that takes it. Empty: a try never waits.
	Waiter string
	Wait   any // ms
	// AskFreed (a waiter's timer, to tell a rescue): the reply says whether
	// the lock was free because the last wake-up went to this waiter.
	AskFreed bool
}

// Args is a's ARGV: for a caller that waits, its ask, waiter id and wait
// in one word, "<ask> <waiter> <wait>", after the words that every call
// sends.
func (a ReentrantAcquire) Args() []any {
	if a.Waiter == "" {
		return []any{a.Owner, a.Request, a.Lease, a.Stale}
	}
	ask := "0"
	if a.AskFreed {
		ask = "1"
	}
	b := make([]byte, 0, 128) // on the stack: the string is the one allocation
	b = word(text(text(b, ask), a.Waiter), a.Wait)
	return []any{a.Owner, a.Request, a.Lease, a.Stale, string(b[1:])}
}

// ReentrantAcquireReply is reentrant_acquire.lua's reply: {1, token, freed}
// when held, {0, ms until the current hold expires} otherwise.
type ReentrantAcquireReply struct {
	Held     bool
	Token    int64
	HoldMs   int64
	Settling bool // a try met a server that lost its data settling (hold.lua's settling), for HoldMs
	// Freed (asked with AskFreed): a fresh hold of a lock free because its
	// last wake-up went to this waiter, whose message should have come.
	Freed bool
}

// DecodeReentrantAcquire reads reentrant_acquire.lua's reply: token (a
// fresh acquisition of a free lock, as {1, token, 0}), {1, token, freed},
// {0, hold ms[, settling]}.
func DecodeReentrantAcquire(v any) (ReentrantAcquireReply, error) {
	if token, ok := v.(int64); ok && token > 0 {
		return ReentrantAcquireReply{Held: true, Token: token}, nil
	}
	r, err := ints(v, 2, "reentrant_acquire")
	if err != nil {
		return ReentrantAcquireReply{}, err
	}
	if r[0] == 1 {
		return ReentrantAcquireReply{Held: true, Token: r[1], Freed: len(r) >= 3 && r[2] == 1}, nil
	}
	return ReentrantAcquireReply{HoldMs: r[1], Settling: len(r) >= 3 && r[2] == 1}, nil
}

// Release is the ARGV of every release script (fair_release.lua,
// reentrant_release.lua, sem_release.lua).
type Release struct {
	Owner, Request   any
	Token            int64
	Publish, Channel any
	// Undo, when not empty, releases a grant whose answer never reached
	// its caller, whatever its token: the acquiring request to undo (only
	// if that request was applied; a semaphore's hold ids are used once,
	// so there the owner's hold is released), or UndoAny.
	Undo string
}

// Args is r's ARGV, the token as TokenText writes it: the uncontended
// release compares it with the hold's text as is (hold.lua's release_own).
func (r Release) Args() []any {
	token := TokenText(r.Token)
	if r.Undo == "" {
		return []any{r.Owner, r.Request, token, r.Publish, r.Channel}
	}
	return []any{r.Owner, r.Request, token, r.Publish, r.Channel, r.Undo}
}

// TokenWidth is the width of a fencing token in a hold's text (hold.lua's
// f: 16 digits, zero-padded).
const TokenWidth = 16

// TokenText is token in decimal, zero-padded to TokenWidth digits when it
// fits (a token past them, or below 0, as it is), in one allocation.
func TokenText(token int64) string {
	var buf [24]byte
	b := strconv.AppendInt(buf[:0], token, 10)
	if token < 0 || len(b) >= TokenWidth {
		return string(b)
	}
	var out [TokenWidth]byte
	pad := TokenWidth - len(b)
	for i := range pad {
		out[i] = '0'
	}
	copy(out[pad:], b)
	return string(out[:])
}

// Release outcomes.
const (
	NotHeld   = 0 // the hold was not this owner's (gone, or another's)
	Released  = 1 // the hold ended
	StillHeld = 2 // a re-entry was undone; the hold goes on
	// ReleasedWatch: the hold ended, handed to a waiter that keeps a
	// presence; the releasing owner looks once more a poll later
	// (fair_release.lua's {1, 1}).
	ReleasedWatch = 3
)

// DecodeRelease reads 1 (the uncontended release, as {1}), {1}, {2}, {0}
// or {1, 1}: one of the outcomes above.
func DecodeRelease(v any) (int, error) {
	if n, ok := v.(int64); ok && n == Released {
		return Released, nil
	}
	r, err := ints(v, 1, "release")
	if err != nil {
		return 0, err
	}
	if len(r) > 1 && r[0] == Released && r[1] == 1 {
		return ReleasedWatch, nil
	}
	return int(r[0]), nil
}

// Renew is renew.lua's and sem_renew.lua's ARGV.
type Renew struct {
	Owner any
	Token int64
	Lease int64  // ms
	From  string // FromNow, or FromGrant for a fixed lease's claim
}

// Args is r's ARGV.
func (r Renew) Args() []any { return []any{r.Owner, r.Token, r.Lease, r.From} }

// DecodeRenew reads {1, ms until expiry} or {0}: whether the hold is still
// this one.
func DecodeRenew(v any) (bool, error) {
	r, err := ints(v, 1, "renew")
	if err != nil {
		return false, err
	}
	return r[0] == 1, nil
}

// Leave is the ARGV of a waiter giving up: fair_leave.lua's, and
// reentrant_leave.lua's with the waiter id for Entry.
type Leave struct{ Owner, Entry, Publish, Channel any }

// Args is l's ARGV.
func (l Leave) Args() []any { return []any{l.Owner, l.Entry, l.Publish, l.Channel} }

// Proclaim is election_proclaim.lua's ARGV.
type Proclaim struct {
	Owner            any
	Token            int64
	Value            string // escaped (EscapeValue)
	Publish, Channel any
}

// Args is p's ARGV.
func (p Proclaim) Args() []any { return []any{p.Owner, p.Token, p.Value, p.Publish, p.Channel} }

// Heartbeat is fair_heartbeat.lua's ARGV: the publish command and channel,
// then an entry id and its wait timeout (ms) per waiter.
func Heartbeat(publish, channel any, entries []string, waits []int64) []any {
	args := make([]any, 0, 2+2*len(entries))
	args = append(args, publish, channel)
	for i, e := range entries {
		args = append(args, e, waits[i])
	}
	return args
}

// Watch is the ARGV of a release's second look (fair_heartbeat.lua with no
// entries, sem_watch.lua, reentrant_watch.lua): the publish command and
// channel, and the releasing client's id (queue.lua's absence_counts).
func Watch(publish, channel any, client string) []any { return []any{publish, channel, client} }

// Heartbeat statuses of an entry.
const (
	BeatQueued  = 0  // still queued; its deadline was pushed
	BeatEvicted = -1 // evicted or gone
	BeatHead    = -2 // still queued, as the live head of a held lock
	// BeatBehindGone: still queued, the first entry whose client is there
	// behind a head whose presence is gone (queue.lua's present_head), news
	// no message carried: the entry is to look again at the expiry.
	BeatBehindGone = -3
	// a positive status is the token of a hold handed to the entry
)

// HeartbeatReply is fair_heartbeat.lua's reply: a status per entry, in
// order, then the grant time (Redis ms) of a hand-off among them, whether
// the beat made that grant itself (ByBeat), and the hold's expiry (Redis
// ms, 0: free).
type HeartbeatReply struct {
	Status  []int64
	Granted int64
	ByBeat  bool
	Expiry  int64
}

// DecodeHeartbeat reads fair_heartbeat.lua's reply for n entries.
func DecodeHeartbeat(v any, n int) (HeartbeatReply, error) {
	r, err := intsOf(v)
	if err != nil {
		return HeartbeatReply{}, err
	}
	if len(r) != n+3 {
		return HeartbeatReply{}, fmt.Errorf("fairlock: fair_heartbeat replied %d elements for %d entries", len(r), n)
	}
	return HeartbeatReply{Status: r[:n], Granted: r[n], ByBeat: r[n+1] == 1, Expiry: r[n+2]}, nil
}

// Publishing is the ARGV of the scripts that take only the publish command
// and the channel (fair_force_unlock.lua, reentrant_force_unlock.lua).
func Publishing(publish, channel any) []any { return []any{publish, channel} }

// HoldState is state.lua's reply: the hold as Redis sees it (Owner "" when
// the lock is free).
type HoldState struct {
	Owner  string
	Count  int
	TTL    time.Duration
	Token  int64
	Origin string
}

// DecodeState reads {} or {owner, count, ms until expiry, token, origin}.
func DecodeState(v any) (HoldState, error) {
	list, ok := v.([]any)
	if !ok {
		return HoldState{}, fmt.Errorf("fairlock: unexpected state reply %T", v)
	}
	if len(list) < 5 {
		return HoldState{}, nil
	}
	owner, _ := list[0].(string)
	count, _ := list[1].(int64)
	ttl, _ := list[2].(int64)
	token, _ := list[3].(int64)
	origin, _ := list[4].(string)
	return HoldState{Owner: owner, Count: int(count), TTL: time.Duration(ttl) * time.Millisecond, Token: token, Origin: origin}, nil
}

// Inspected is fair_inspect.lua's reply.
type Inspected struct {
	Now    int64 // Redis's clock, ms
	Holder *InspectedHolder
	// Elements are the queue list's elements in order; a Deadline of -1
	// marks a tombstone (the entry gave up).
	Elements []InspectedElement
}

// InspectedHolder is the hold fair_inspect.lua reports.
type InspectedHolder struct {
	Owner  string
	Count  int
	TTL    time.Duration
	Token  int64
	Origin string
	Entry  string // the entry a pending hand-off was granted to ("": claimed)
	// Permit is, on a semaphore's gate, the permit request its holder
	// waits with.
	Permit PermitRequest
}

// InspectedElement is one queue element.
type InspectedElement struct {
	Entry    string
	Deadline int64 // Redis ms, -1 for a tombstone
	Info     string
}

// DecodeInspect reads {now, holder, count, ms left, token, origin, granted
// entry, the holder's permit owner, then per element: entry, deadline or -1,
// the element's info}.
func DecodeInspect(v []any) (Inspected, error) {
	if len(v) < 8 {
		return Inspected{}, fmt.Errorf("fairlock: unexpected inspect reply of %d elements", len(v))
	}
	str := func(i int) string { s, _ := v[i].(string); return s }
	num := func(i int) int64 { n, _ := v[i].(int64); return n }
	in := Inspected{Now: num(0)}
	if owner := str(1); owner != "" {
		in.Holder = &InspectedHolder{Owner: owner, Count: int(num(2)), TTL: time.Duration(num(3)) * time.Millisecond,
			Token: num(4), Origin: str(5), Entry: str(6), Permit: ParseRequest(str(7))}
	}
	for i := 8; i+2 < len(v); i += 3 {
		in.Elements = append(in.Elements, InspectedElement{Entry: str(i), Deadline: num(i + 1), Info: str(i + 2)})
	}
	return in, nil
}

// DecodeElectionInspect reads election_inspect.lua's reply: the
// leadership's text and the queue's snapshot, as DecodeInspect reads it.
func DecodeElectionInspect(v []any) (Leadership, Inspected, error) {
	if len(v) != 2 {
		return Leadership{}, Inspected{}, fmt.Errorf("fairlock: unexpected election inspect reply of %d elements", len(v))
	}
	text, _ := v[0].(string)
	l, err := ParseLeadership(text)
	if err != nil {
		return Leadership{}, Inspected{}, err
	}
	q, _ := v[1].([]any)
	in, err := DecodeInspect(q)
	return l, in, err
}

// SemAcquire is sem_acquire.lua's ARGV.
type SemAcquire struct {
	Owner            string
	N                int
	Lease            int64 // ms
	Permits          int   // the handle's number, used when none is recorded
	Mode             string
	GateOwner        string // SemGate: the caller's gate hold
	GateToken        int64
	Origin           string
	Publish, Channel string
}

// Args is a's ARGV.
func (a SemAcquire) Args() []any {
	return []any{a.Owner, a.N, a.Lease, a.Permits, a.Mode, a.GateOwner, a.GateToken, a.Origin, a.Publish, a.Channel}
}

// SemAcquireReply is sem_acquire.lua's reply.
type SemAcquireReply struct {
	Held     bool
	Token    int64
	Granted  int64 // Held: when the permits were served to the caller as it waited (Redis ms; 0: granted to this call)
	Expiry   int64 // Held: the hold's expiry (Redis ms)
	GateLost bool  // SemGate: the caller no longer holds the gate
	TooMany  int64 // the caller asked for more than this, the semaphore's number
	Checked  bool  // SemCheck: nothing was served to the caller
	Next     int64 // not now: when the first permit hold expires (Redis ms, 0: none)
	Now      int64 // Redis's clock (ms), for Held and not now
	// Settling: the permits are held by nobody's while a server that lost
	// its data settles (hold.lua's settling), until Next.
	Settling bool
}

// DecodeSemAcquire reads {1, 1, token, g, expiry, now}, {0, next expiry, K,
// used, now}, {-1}, {-2, K} or {-3}.
func DecodeSemAcquire(v any) (SemAcquireReply, error) {
	r, err := ints(v, 1, "sem_acquire")
	if err != nil {
		return SemAcquireReply{}, err
	}
	switch {
	case r[0] == -1:
		return SemAcquireReply{GateLost: true}, nil
	case r[0] == -2 && len(r) >= 2:
		return SemAcquireReply{TooMany: r[1]}, nil
	case r[0] == -3:
		return SemAcquireReply{Checked: true}, nil
	case r[0] == 1 && len(r) >= 6:
		return SemAcquireReply{Held: true, Token: r[2], Granted: r[3], Expiry: r[4], Now: r[5]}, nil
	case r[0] == 0 && len(r) >= 5:
		return SemAcquireReply{Next: r[1], Now: r[4], Settling: len(r) >= 6 && r[5] == 1}, nil
	}
	return SemAcquireReply{}, fmt.Errorf("fairlock: unexpected sem_acquire reply %v", r)
}

// SemSet is sem_set.lua's ARGV.
func SemSet(permits int, publish, channel string) []any { return []any{permits, publish, channel} }

// SemResize is sem_resize.lua's ARGV.
func SemResize(owner string, token int64, n int, publish, channel string) []any {
	return []any{owner, token, n, publish, channel}
}

// SemState is sem_state.lua's reply.
type SemState struct {
	Permits int   // 0: none recorded
	Now     int64 // Redis's clock, ms
	Holds   []SemHold
}

// SemHold is one permit hold in force.
type SemHold struct {
	Owner   string
	Permits int
	TTL     time.Duration
	Token   int64
	Origin  string
}

// DecodeSemState reads {K, now, then per hold: owner, permits, ms until
// expiry, token, origin}.
func DecodeSemState(v []any) (SemState, error) {
	if len(v) < 2 || (len(v)-2)%5 != 0 {
		return SemState{}, fmt.Errorf("fairlock: unexpected semaphore state reply of %d elements", len(v))
	}
	str := func(i int) string { s, _ := v[i].(string); return s }
	num := func(i int) int64 { n, _ := v[i].(int64); return n }
	st := SemState{Permits: int(num(0)), Now: num(1)}
	for i := 2; i+4 < len(v); i += 5 {
		st.Holds = append(st.Holds, SemHold{Owner: str(i), Permits: int(num(i + 1)),
			TTL: time.Duration(num(i+2)) * time.Millisecond, Token: num(i + 3), Origin: str(i + 4)})
	}
	return st, nil
}

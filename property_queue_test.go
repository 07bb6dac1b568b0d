package fairlock_test

// What the specifications read from Redis itself, not from the library: the
// messages published on a lock's channel, and the raw queue keys.

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/internal/transport"
	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"
)

// channelLog is a subscriber of its own to every inbox of a lock (one per
// client, under its channel: transport.Inbox): it keeps every note Redis
// published there (a message's notes are separated by ';'), so a
// specification can count them, and the notes that came to the inbox of a
// client other than the one their waiter is of. SyncHubs' markers are no
// notes.
type channelLog struct {
	client *redis.Client
	ps     *redis.PubSub
	name   string
	done   chan struct{}

	mu          sync.Mutex
	notes       []string
	misdirected []string // "<note> on <channel>"
	markers     map[string]chan struct{}
	seq         int
}

func newChannelLog(t *rapid.T, client *redis.Client, channel string) *channelLog {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ps := client.PSubscribe(ctx, channel+":*")
	if _, err := ps.Receive(ctx); err != nil { // the confirmation
		t.Fatalf("subscribing to %s: %v", channel, err)
	}
	c := &channelLog{client: client, ps: ps, name: channel, done: make(chan struct{}), markers: map[string]chan struct{}{}}
	go c.receive()
	return c
}

func (c *channelLog) receive() {
	defer close(c.done)
	for {
		msg, err := c.ps.ReceiveMessage(context.Background())
		if err != nil {
			return // closed
		}
		c.mu.Lock()
		if ch, ok := c.markers[msg.Payload]; ok {
			delete(c.markers, msg.Payload)
			close(ch)
		} else if !strings.HasPrefix(msg.Payload, redistest.SyncMarker) {
			for _, note := range strings.Split(msg.Payload, transport.NoteSeparator) {
				c.notes = append(c.notes, note)
				if msg.Channel != transport.Inbox(c.name, transport.NoteTarget(note)) {
					c.misdirected = append(c.misdirected, note+" on "+msg.Channel)
				}
			}
		}
		c.mu.Unlock()
	}
}

// take returns the notes published since the last take. A marker of its
// own, published now and read back, proves that everything published
// before it has been read (a subscriber gets a channel's messages in order).
func (c *channelLog) take(t *rapid.T) []string {
	c.mu.Lock()
	c.seq++
	marker := fmt.Sprintf("%sspec-%d", redistest.SyncMarker, c.seq)
	read := make(chan struct{})
	c.markers[marker] = read
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.client.Publish(ctx, c.name+":spec", marker).Err(); err != nil {
		t.Fatalf("publishing a marker on %s: %v", c.name, err)
	}
	select {
	case <-read:
	case <-ctx.Done():
		t.Fatalf("the marker on %s did not come back", c.name)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.misdirected) > 0 {
		t.Fatalf("messages: a note reached a client other than its waiter's (transport.Inbox): %q", c.misdirected)
	}
	notes := c.notes
	c.notes = nil
	return notes
}

func (c *channelLog) close() {
	_ = c.ps.Close()
	<-c.done
}

// rawQueue is a fair queue as its two keys hold it: the list's entries in
// order, and the deadlines zset (entry -> deadline, Redis ms).
type rawQueue struct {
	entries   []string
	deadlines map[string]int64
}

func readQueue(t *rapid.T, client *redis.Client, queue, deadlines string) rawQueue {
	ctx := context.Background()
	elems, err := client.LRange(ctx, queue, 0, -1).Result()
	if err != nil {
		t.Fatalf("LRANGE %s: %v", queue, err)
	}
	zs, err := client.ZRangeWithScores(ctx, deadlines, 0, -1).Result()
	if err != nil {
		t.Fatalf("ZRANGE %s: %v", deadlines, err)
	}
	q := rawQueue{deadlines: map[string]int64{}}
	for _, e := range elems {
		entry, _, _ := strings.Cut(e, "|")
		q.entries = append(q.entries, entry)
	}
	for _, z := range zs {
		q.deadlines[z.Member.(string)] = int64(z.Score)
	}
	return q
}

// front is the entry at the front of the list, and whether it is live at
// Redis time now (ms): its deadline is ahead.
func (q rawQueue) front(now int64) (string, bool) {
	if len(q.entries) == 0 {
		return "", false
	}
	d, ok := q.deadlines[q.entries[0]]
	return q.entries[0], ok && d > now
}

// checkTidy is the queue's tidiness invariant: every entry appears in the
// list at most once, and every member of the deadlines zset is an entry of
// the list (an entry that left the list left the zset with it). An entry in
// the list without a deadline is a tombstone, which cleanup pops.
func (q rawQueue) checkTidy(t *rapid.T, what string) {
	in := make(map[string]bool, len(q.entries))
	for _, e := range q.entries {
		if in[e] {
			t.Fatalf("tidiness: entry %s is in %s's queue list twice: %v", e, what, q.entries)
		}
		in[e] = true
	}
	for e, d := range q.deadlines {
		if !in[e] {
			t.Fatalf("tidiness: %s's deadlines keep entry %s (deadline %d), which is not in its queue list %v", what, e, d, q.entries)
		}
	}
}

// redisNow is Redis's clock, in ms, as the fake clock sets it.
func redisNow(t time.Time) int64 { return t.UnixMilli() }

// queueLedger checks a fair queue from what Redis shows after each step:
// the notes published on its channel since the last step, its raw keys,
// and its hold. It is guarantee 6's "one message and one timer per change
// of head, to the new head only" counted, and the queue's tidiness:
//   - every note is one the protocol defines;
//   - a hand-off message names an entry no longer queued, once, with a
//     token above every earlier hand-off's, and a hand-off not yet claimed
//     (the hold's e) had its message;
//   - an entry gets at most one head notice in its life while it is the
//     front of the list; one behind the front only while every live entry
//     ahead of it is of a client that keeps a presence (present_head);
//   - the live front of the list of a held lock knows when the hold ends:
//     from its head notice or, when it joined at the front (the first time
//     the entry is seen, it is there), from its join's reply;
//   - on a semaphore's gate, permits notes carry rising tokens, never serve
//     a waiter whose grant is still in force, and every permit hold served
//     and not yet claimed had its note.
type queueLedger struct {
	what       string
	wire       *channelLog
	hold       string // the hold's key; the queue's are hold+":queue", ":deadlines"
	permits    string // a semaphore's permits key, "" for a lock
	seen       map[string]bool
	told       map[string]bool
	grants     map[string]int64
	lastGrant  int64
	served     map[string]int64 // waiters (gate owners) served by a note: the grant's expiry
	noted      map[int64]bool   // tokens of the permit holds served by a note
	lastPermit int64
	// prev is the queue as the last check read it: a note published in a
	// step was sent against a queue between prev and the one read now.
	// behind are the entries whose notice in this step's batch counted as
	// one sent behind a gone head (at most one each per step).
	prev   rawQueue
	behind map[string]bool
	// replies, if not nil, are the head flags of the waiters' own replies:
	// a waiter whose own attempt popped the dead entries ahead of it learns
	// from its reply that it is the head, and is sent no notice.
	replies *headReplies
}

// headReplies is a client hook that records the entries a fair_acquire
// reply told they are the live head ({0, hold ms, 1, now, ...}).
type headReplies struct {
	script *transport.Script
	mu     sync.Mutex
	heads  map[string]bool
}

func newHeadReplies(script *transport.Script) *headReplies {
	return &headReplies{script: script, heads: map[string]bool{}}
}

// told reports whether a reply told entry it is the head.
func (h *headReplies) told(entry string) bool {
	if h == nil {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.heads[entry]
}

func (h *headReplies) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *headReplies) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		args := cmd.Args()
		if err != nil || !redistest.Calls(h.script, args) {
			return err
		}
		res, ok := reply(cmd)
		if !ok {
			return err
		}
		// FCALL fn numkeys keys... owner request lease label "<entry> ..."
		// (EVALSHA alike; transport.FairAcquire.Args): ARGV[5] starts with the
		// entry.
		keys, _ := strconv.Atoi(fmt.Sprint(args[2]))
		if len(res) >= 3 && res[0] == int64(0) && res[2] == int64(1) && len(args) > 7+keys {
			entry, _, _ := strings.Cut(fmt.Sprint(args[7+keys]), " ")
			h.mu.Lock()
			h.heads[entry] = true
			h.mu.Unlock()
		}
		return err
	}
}

// reply is a script call's reply as a hook sees it. Not only a *redis.Cmd:
// a call with a deadline is made on one of the client's views
// (internal/transport/views.go), as a type that embeds it. A bare integer
// (the uncontended paths': a token, or 1 for a release's {1}) is a list of
// one.
func reply(cmd redis.Cmder) ([]any, bool) {
	v, ok := cmd.(interface{ Result() (any, error) })
	if !ok {
		return nil, false
	}
	res, _ := v.Result()
	if n, ok := res.(int64); ok {
		return []any{n}, true
	}
	list, _ := res.([]any)
	return list, true
}

func (h *headReplies) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// newQueueLedger watches the fair queue whose hold key is hold (its inboxes
// are under hold+":wake"); permits is a semaphore's permits key, for its gate.
func newQueueLedger(t *rapid.T, client *redis.Client, what, hold, permits string) *queueLedger {
	return &queueLedger{what: what, wire: newChannelLog(t, client, hold+":wake"), hold: hold, permits: permits,
		seen: map[string]bool{}, told: map[string]bool{}, grants: map[string]int64{}, served: map[string]int64{}, noted: map[int64]bool{}}
}

func (l *queueLedger) close() { l.wire.close() }

// rawHold reads a hold key's JSON object (hold.lua's fields), nil if none.
func rawHold(t *rapid.T, client *redis.Client, key string) map[string]any {
	raw, err := client.Get(context.Background(), key).Result()
	if err == redis.Nil {
		return nil
	}
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	v, err := redistest.DecodeHold(raw)
	if err != nil {
		t.Fatalf("%s is not a hold: %v", key, err)
	}
	return v
}

func field(v map[string]any, name string) string {
	s, _ := v[name].(string)
	return s
}

// recordInt reads a number field of a record; 0 if it is not one.
func recordInt(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

func number(v map[string]any, name string) int64 {
	n, _ := strconv.ParseInt(field(v, name), 10, 64)
	return n
}

// check runs after every step, at Redis time now. It returns the hold as
// it read it (hold.lua's fields), for the caller's own checks.
func (l *queueLedger) check(t *rapid.T, client *redis.Client, now time.Time) map[string]any {
	ms := redisNow(now)
	q := readQueue(t, client, l.hold+":queue", l.hold+":deadlines")
	q.checkTidy(t, l.what)
	l.behind = map[string]bool{}
	// The queue was read before the notes were taken: a call the library
	// made in between, on a goroutine of its own (a lost hold's release, a
	// release's second look), may have handed the lock on since and
	// published it. A grant to an entry still in q is a fault only if a
	// queue read after the take still has it (entries are never re-used).
	stillQueued := func(entry string) bool {
		return slices.Contains(q.entries, entry) &&
			slices.Contains(readQueue(t, client, l.hold+":queue", l.hold+":deadlines").entries, entry)
	}
	for _, text := range l.wire.take(t) {
		l.note(t, text, q, now, stillQueued)
	}
	defer func() { l.prev = q }()
	// An entry seen for the first time joined in the last step: at the
	// front, it joined as the head, and its join's reply said so.
	for i, e := range q.entries {
		if !l.seen[e] {
			l.seen[e] = true
			if i == 0 {
				l.told[e] = true
			}
		}
	}
	hold := rawHold(t, client, l.hold)
	held := field(hold, "o") != "" && number(hold, "x") > ms
	if e := field(hold, "e"); e != "" && number(hold, "x") <= number(hold, "g") {
		t.Fatalf("hand-off: %s was handed to %s at %d until %d: to an entry already dead", l.what, e, number(hold, "g"), number(hold, "x"))
	}
	if e := field(hold, "e"); held && e != "" && l.grants[e] != number(hold, "f") {
		t.Fatalf("messages: %s was handed to %s (token %d) with no message to it", l.what, e, number(hold, "f"))
	}
	if f, live := q.front(ms); live && held && !l.told[f] && !l.replies.told(f) {
		t.Fatalf("head notice: %s is the live head of %s, held until %d (now %d), and no message told it when the hold ends",
			f, l.what, number(hold, "x"), ms)
	}
	if l.permits != "" {
		p, _ := rawHold(t, client, l.permits)["p"].(map[string]any)
		for owner, rec := range p {
			parts := strings.Split(fmt.Sprint(rec), "|")
			if len(parts) >= 4 && parts[3] != "0" && !l.noted[recordInt(parts[2])] {
				t.Fatalf("messages: permits were served to %s (%v) with no message", owner, rec)
			}
		}
	}
	return hold
}

// note accounts for one note published on the queue's channel.
func (l *queueLedger) note(t *rapid.T, text string, q rawQueue, now time.Time, stillQueued func(entry string) bool) {
	f := strings.Fields(text)
	switch {
	case l.permits != "" && len(f) == 5 && f[1] == "permits":
		// "<id> permits <token> <grant ms> <expiry ms>": id is the gate's
		// owner, or a queue entry ("<gate owner>/<n>"); either way the
		// waiter is its gate owner, which it keeps while it waits.
		token, err1 := strconv.ParseInt(f[2], 10, 64)
		granted, err2 := strconv.ParseInt(f[3], 10, 64)
		expiry, err3 := strconv.ParseInt(f[4], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil || token <= l.lastPermit || expiry < granted {
			t.Fatalf("messages: %q on %s: not a grant with a token above the previous grant's %d", text, l.what, l.lastPermit)
		}
		// A first waiter whose grant ran out unclaimed is still first in
		// line, and may be served again; never while a grant is in force.
		owner := f[0]
		if o := transport.OwnerOfEntry(f[0]); o != "" {
			owner = o
		}
		if until, ok := l.served[owner]; ok && granted < until {
			t.Fatalf("messages: permits served to %s again (%q) while its grant until %d is in force", owner, text, until)
		}
		if stillQueued(f[0]) {
			t.Fatalf("messages: permits served to %s, which is still in %s's queue", f[0], l.what)
		}
		l.served[owner], l.lastPermit = expiry, token
		l.noted[token] = true
	case l.permits != "" && len(f) == 2 && f[1] == "freed":
		// The gate's holder is to look for itself.
	default:
		n, ok := parseFairNote(text)
		if !ok {
			t.Fatalf("messages: %q on %s's channel is not a note of the protocol", text, l.what)
		}
		if n.head {
			// Nothing joins ahead of an entry: a head stays at the front.
			// Behind a head whose client's presence is gone, the first
			// entry whose client is there is told too (once per such
			// head): only entries of clients that keep a presence, or dead
			// ones, may be ahead of it.
			if i := slices.Index(q.entries, n.entry); i > 0 {
				for _, e := range q.entries[:i] {
					if d, ok := q.deadlines[e]; ok && d > redisNow(now) && !keepsPresence(e) {
						t.Fatalf("messages: a head notice to %s, which has %v ahead of it in the queue, %s of a client that keeps no presence",
							n.entry, q.entries[:i], e)
					}
				}
				return
			}
			if l.told[n.entry] && !l.wasBehind(n.entry, q) {
				t.Fatalf("messages: a second head notice to %s (%q): one message per change of head", n.entry, text)
			}
			l.told[n.entry] = true
			return
		}
		if tok, dup := l.grants[n.entry]; dup {
			t.Fatalf("messages: a second hand-off to %s (tokens %d and %d)", n.entry, tok, n.token)
		}
		if n.token <= l.lastGrant {
			t.Fatalf("messages: a hand-off to %s with token %d, not above the previous hand-off's %d", n.entry, n.token, l.lastGrant)
		}
		if stillQueued(n.entry) {
			t.Fatalf("messages: a hand-off to %s, which is still in the queue %v", n.entry, q.entries)
		}
		l.grants[n.entry], l.lastGrant = n.token, n.token
	}
}

// wasBehind reports whether a head notice to entry, which is at the front of
// q now and was told already, may be the one it was sent in this step while
// it stood behind a gone head: before the step it was not at the front, and
// every entry then ahead of it that has left since was of a client that
// keeps a presence (the notice is sent only behind such entries). The step
// may then have popped them, and told the entry again as the head: both
// notices reach the ledger in one batch, judged against the queue after it.
// At most one notice per entry and step counts so.
func (l *queueLedger) wasBehind(entry string, q rawQueue) bool {
	i := slices.Index(l.prev.entries, entry)
	if i <= 0 || l.behind[entry] {
		return false
	}
	for _, e := range l.prev.entries[:i] {
		if !slices.Contains(q.entries, e) && !keepsPresence(e) {
			return false
		}
	}
	l.behind[entry] = true
	return true
}

// fairNote is one note of a fair lock's channel: a hand-off ("<entry>
// <token> <grant ms>") or a head notice ("<entry> head <expiry ms>").
type fairNote struct {
	entry  string
	head   bool
	token  int64 // a hand-off's
	number int64 // the grant time, or the notice's expiry
}

func parseFairNote(note string) (fairNote, bool) {
	f := strings.Fields(note)
	if len(f) != 3 || f[0] == "" {
		return fairNote{}, false
	}
	n, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil {
		return fairNote{}, false
	}
	if f[1] == "head" {
		return fairNote{entry: f[0], head: true, number: n}, true
	}
	token, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return fairNote{}, false
	}
	return fairNote{entry: f[0], token: token, number: n}, true
}

// keepsPresence reports whether the client of queue entry e keeps a
// presence (its id ends in transport.PresenceMark).
func keepsPresence(e string) bool {
	return strings.HasSuffix(transport.ClientOf(e), transport.PresenceMark)
}

package transport

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// Keys and channels. Every key of one lock shares the hash tag {name}, so
// every script is single-slot and runs on Redis Cluster.

// FairBase is where a fair lock's keys start.
func FairBase(name string) string { return "fairlock:f:{" + name + "}" }

// SemaphoreBase is where a fair semaphore's keys start.
func SemaphoreBase(name string) string { return "fairlock:s:{" + name + "}" }

// RWBase is where a fair read-write lock's keys start (a semaphore's).
func RWBase(name string) string { return "fairlock:rw:{" + name + "}" }

// GateBase is where the gate of the semaphore at base keeps its keys.
func GateBase(base string) string { return base + ":gate" }

// ElectionBase is where an election's keys start: a fair queue's keys
// (QueueKeys), whose hold also names the leader's value.
func ElectionBase(name string) string { return "fairlock:e:{" + name + "}" }

// QueueKeys are a fair queue's keys at base: the hold, the queue list, the
// deadlines zset.
func QueueKeys(base string) []string {
	return []string{base, base + ":queue", base + ":deadlines"}
}

// Channel is the lock at base's channel: nothing is published on it; the
// notes for its waiters go to the inboxes under it (Inbox).
func Channel(base string) string { return base + ":wake" }

// Inbox is where the notes for id (a hold or entry id) arrive: its
// client's channel, "<channel>:<client>", so a hand-off reaches only the
// client whose waiter it names. It shares the channel's hash tag (on
// Cluster it lives in the lock's slot).
func Inbox(channel, id string) string { return channel + ":" + ClientOf(id) }

// LeaderChannel is where an election's scripts publish every change of
// its leadership (ParseLeadership), one message for all observing clients.
// channel is the election's Channel; no inbox has its name (a client id is
// 22 or 23 characters).
func LeaderChannel(channel string) string { return channel + ":leader" }

// ReentrantKey is a reentrant lock's one key.
func ReentrantKey(name string) string { return "fairlock:r:{" + name + "}" }

// Ids.

// IDs makes one owner's ids: its client id, and fresh hold, entry and
// request ids under it (no counter is shared by the process).
type IDs struct {
	client string
	n      atomic.Uint64
}

// NewIDs returns the ids of a new owner, whose client id is a random UUID
// in 22 characters: the name of its inboxes (Inbox), and the first part of
// the hold ids of the handles made on it.
func NewIDs() *IDs {
	u := uuid.New()
	return &IDs{client: base64.RawURLEncoding.EncodeToString(u[:])}
}

// PresenceMark ends the client id of an owner that keeps a presence
// (NewIDsWithPresence): the scripts read it from a holder's id.
const PresenceMark = "~"

// NewIDsWithPresence returns a fresh client id, marked as one that keeps a
// presence on PresenceChannel(client), and its counter.
func NewIDsWithPresence() *IDs {
	ids := NewIDs()
	ids.client += PresenceMark
	return ids
}

// PresenceChannel is the pub/sub channel a client that keeps a presence
// stays subscribed to (queue.lua's presence_channel).
func PresenceChannel(client string) string { return "fairlock:presence:" + client }

// Client returns the client id.
func (ids *IDs) Client() string { return ids.client }

// HoldID returns a fresh hold id, "<client>.<n>": one per handle (or per
// slot of a handle).
func (ids *IDs) HoldID() string { return ids.idOf(ids.client, '.') }

// Entry returns a fresh queue entry id of a hold id, "<hold>/<n>".
func (ids *IDs) Entry(owner string) string { return ids.idOf(owner, '/') }

// Request returns a fresh request id of a hold id, "<hold>#<n>".
func (ids *IDs) Request(owner string) string { return ids.idOf(owner, '#') }

// idOf is prefix + sep + a fresh number, in one allocation.
func (ids *IDs) idOf(prefix string, sep byte) string {
	var buf [64]byte
	b := append(append(buf[:0], prefix...), sep)
	return string(strconv.AppendUint(b, ids.n.Add(1), 36))
}

// ClientOf returns the client id a hold id or entry id begins with (the
// whole of an id that has no client part).
func ClientOf(id string) string {
	if i := strings.IndexByte(id, '.'); i >= 0 {
		return id[:i]
	}
	return id
}

// OwnerOfEntry returns the hold id an entry id extends ("" if none).
func OwnerOfEntry(entry string) string {
	if j := strings.LastIndexByte(entry, '/'); j >= 0 {
		return entry[:j]
	}
	return ""
}

// Origin is where a handle runs, and its label, as Inspect shows it.
type Origin struct {
	Host  string
	PID   int
	Label string
}

// EncodeOrigin is origin as the scripts store it: "<host>\t<pid>\t<label>".
func EncodeOrigin(host string, pid int, label string) string {
	return host + "\t" + strconv.Itoa(pid) + "\t" + label
}

// EscapeJSON is s as it stands between the quotes of a JSON string: the
// form in which fair_acquire.lua takes a label, which the hold keeps inside
// its JSON text as it comes (internal/lua/hold.lua).
func EscapeJSON(s string) string {
	b, _ := json.Marshal(s) // a string always marshals
	return string(b[1 : len(b)-1])
}

// ParseOrigin reads EncodeOrigin's text; text of another form is all label.
func ParseOrigin(s string) Origin {
	parts := strings.SplitN(s, "\t", 3)
	if len(parts) < 3 {
		return Origin{Label: s}
	}
	pid, _ := strconv.Atoi(parts[1])
	return Origin{Host: parts[0], PID: pid, Label: parts[2]}
}

// ParseElementInfo reads "<lease>|<wait>|<request>|<origin>", what follows
// a queue element's entry id (fair_inspect.lua): its origin, and its permit
// request (zero but on a semaphore's gate).
func ParseElementInfo(info string) (origin Origin, req PermitRequest, ok bool) {
	parts := strings.SplitN(info, "|", 4)
	if len(parts) != 4 {
		return Origin{}, PermitRequest{}, false
	}
	if strings.HasPrefix(parts[2], "=") { // an election candidate's value
		return ParseOrigin(parts[3]), PermitRequest{}, true
	}
	return ParseOrigin(parts[3]), ParseRequest(parts[2]), true
}

// EscapeValue is a candidate's value as the scripts keep it (its queue
// element's "=<value>", the hold, the leadership's text): with no '|', ' '
// or ';', as a URL path segment percent-escapes it.
func EscapeValue(v string) string { return url.PathEscape(v) }

// UnescapeValue undoes EscapeValue (and the scripts' escaping of an
// origin); text it cannot read is returned as it is.
func UnescapeValue(text string) string {
	v, err := url.PathUnescape(text)
	if err != nil {
		return text
	}
	return v
}

// ElementValue is the candidate's value in what follows the entry id of an
// election's queue element (ParseElementInfo's info); ok is false for an
// element of any other queue.
func ElementValue(info string) (value string, ok bool) {
	parts := strings.SplitN(info, "|", 4)
	if len(parts) != 4 || !strings.HasPrefix(parts[2], "=") {
		return "", false
	}
	return UnescapeValue(parts[2][1:]), true
}

// Leadership is an election's leadership as the scripts tell it
// (hold.lua's leadership_text): "leader <version> <term> <since ms>
// <expiry ms> <now ms> <value> <origin>", term 0 when nobody leads.
type Leadership struct {
	Version int64 // grows with every change of leader, term or value
	Term    int64 // the leader's fencing token; 0: no leader
	Since   int64 // Redis ms: when the term began
	Expiry  int64 // Redis ms: when the leader's lease runs out, unless renewed
	Now     int64 // Redis ms: when the text was made
	Value   string
	Origin  Origin
}

// LeadershipNote is the first word of a leadership's text: the id of the
// one subscription (an observing owner's) that reads an election's leader
// channel.
const LeadershipNote = "leader"

// ParseLeadership reads a leadership's text.
func ParseLeadership(text string) (Leadership, error) {
	f := strings.SplitN(text, " ", 8)
	if len(f) != 8 || f[0] != LeadershipNote {
		return Leadership{}, fmt.Errorf("fairlock: unexpected leadership %q", text)
	}
	var n [5]int64
	for i := range n {
		v, err := strconv.ParseInt(f[i+1], 10, 64)
		if err != nil {
			return Leadership{}, fmt.Errorf("fairlock: unexpected leadership %q", text)
		}
		n[i] = v
	}
	l := Leadership{Version: n[0], Term: n[1], Since: n[2], Expiry: n[3], Now: n[4]}
	if l.Term != 0 {
		l.Value, l.Origin = UnescapeValue(f[6]), ParseOrigin(UnescapeValue(f[7]))
	}
	return l, nil
}

// ParseRequest reads a permit request as wire.lua's request_text writes
// it, "<owner> <n> <lease ms>"; a hold id alone (an older layout) gives
// the owner only.
func ParseRequest(text string) PermitRequest {
	f := strings.Fields(text)
	var r PermitRequest
	if len(f) > 0 {
		r.Owner = f[0]
	}
	if len(f) > 1 {
		r.N, _ = strconv.Atoi(f[1])
	}
	if len(f) > 2 {
		r.Lease, _ = strconv.ParseInt(f[2], 10, 64)
	}
	return r
}

// Notes: what the scripts publish on a lock's channel. One message carries
// one or more notes, separated by NoteSeparator; each note's first word is
// the id of the waiter it is for (an entry id, or a gate's hold id), or it
// is empty: a wake-up for any one waiter (the reentrant lock's release).

// NoteSeparator separates the notes of one message.
const NoteSeparator = ";"

// NoteTarget is the id a note is for: its first word ("" for any waiter).
func NoteTarget(note string) string {
	target, _, _ := strings.Cut(note, " ")
	return target
}

// Note is one note, parsed: HandOff, HeadNotice, Served or Freed.
type Note interface{ note() }

type (
	// HandOff: "<entry> <token> <grant ms>": the lock was handed to the
	// entry at Redis time GrantedAt.
	HandOff struct{ Token, GrantedAt int64 }
	// HeadNotice: "<entry> head <expiry ms>": the entry became the head of a
	// held lock whose hold expires at Redis time Expiry.
	HeadNotice struct{ Expiry int64 }
	// Served: "<id> permits <token> <grant ms> <expiry ms>": a semaphore's
	// waiter was granted its permits at Redis time GrantedAt, until Expiry
	// unless claimed.
	Served struct{ Token, GrantedAt, Expiry int64 }
	// Freed: "<id> freed": permits were freed, but the gate's holder asks
	// for what the script cannot grant (more than the semaphore has): it
	// looks for itself.
	Freed struct{}
)

func (HandOff) note()    {}
func (HeadNotice) note() {}
func (Served) note()     {}
func (Freed) note()      {}

// ParseNote reads one note. mine reports whether it is for id; n is nil
// when it cannot be read (news for id all the same: look again).
func ParseNote(note, id string) (n Note, mine bool) {
	target, rest, _ := strings.Cut(note, " ")
	if target != id {
		return nil, false
	}
	if rest == "freed" {
		return Freed{}, true
	}
	if rest, ok := strings.CutPrefix(rest, "permits "); ok {
		if s, ok := parseServed(rest); ok {
			return s, true
		}
		return nil, true
	}
	a, b, _ := strings.Cut(rest, " ")
	ms, err := strconv.ParseInt(b, 10, 64)
	if err != nil {
		return nil, true
	}
	if a == "head" {
		return HeadNotice{Expiry: ms}, true
	}
	token, err := strconv.ParseInt(a, 10, 64)
	if err != nil {
		return nil, true
	}
	return HandOff{Token: token, GrantedAt: ms}, true
}

// IsNote reports whether note is a note of type T (HandOff, Served, ...)
// for id.
func IsNote[T Note](note, id string) bool {
	n, _ := ParseNote(note, id)
	_, ok := n.(T)
	return ok
}

func parseServed(text string) (Served, bool) {
	f := strings.Fields(text)
	if len(f) != 3 {
		return Served{}, false
	}
	var v [3]int64
	for i, x := range f {
		n, err := strconv.ParseInt(x, 10, 64)
		if err != nil {
			return Served{}, false
		}
		v[i] = n
	}
	return Served{Token: v[0], GrantedAt: v[1], Expiry: v[2]}, v[2] >= v[1]
}

// Modes and flags: the words that select what a script does.
const (
	// fair_acquire.lua's modes.
	ModeTry    = "try"    // never queue (TryLock with no wait)
	ModeJoin   = "join"   // queue a fresh entry if the lock cannot be taken
	ModeQueued = "queued" // a waiter that believes it is queued

	// sem_acquire.lua's modes.
	SemTry   = "try"   // take permits only if nobody waits
	SemGate  = "gate"  // the gate's holder, the first waiter
	SemCheck = "check" // only ask whether permits were served to the caller

	// renew.lua's and sem_renew.lua's ARGV[4].
	FromNow   = "0" // a renewal: the lease counts from now
	FromGrant = "1" // a fixed lease's claim: it counts from the grant

	// UndoAny is a release's undo argument when the owner's hold is to be
	// released whatever its token, and no request names it: permits served
	// to a semaphore's waiter that stopped waiting (hold ids of permit
	// holds are used once).
	UndoAny = "any"
)

// Ms is d in whole milliseconds, at least 1: how durations travel.
func Ms(d time.Duration) int64 {
	if ms := d.Milliseconds(); ms > 0 {
		return ms
	}
	return 1
}

// intsOf reads a reply of integers.
func intsOf(v any) ([]int64, error) {
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("fairlock: unexpected script reply %T", v)
	}
	out := make([]int64, len(list))
	for i, e := range list {
		n, ok := e.(int64)
		if !ok {
			return nil, fmt.Errorf("fairlock: unexpected script reply element %T", e)
		}
		out[i] = n
	}
	return out, nil
}

// ints reads a reply of at least n integers.
func ints(v any, n int, script string) ([]int64, error) {
	r, err := intsOf(v)
	if err != nil {
		return nil, err
	}
	if len(r) < n {
		return nil, fmt.Errorf("fairlock: %s replied %d elements, want at least %d", script, len(r), n)
	}
	return r, nil
}

package transport

import (
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Values read back from Redis are parsed without trusting them: whatever
// they hold, parsing never panics.

func FuzzParseNote(f *testing.F) {
	f.Add("c.1/7 1700000000000001 1700000000123", "c.1/7")
	f.Add("c.1/7 head 1700000000456", "c.1/7")
	f.Add("c.1/7 head", "c.1/7")
	f.Add("c.1/7  ", "c.1/7")
	f.Add("", "")
	f.Add("c.1/8 1 2", "c.1/7")
	f.Add("c.1/7 permits 5 1700000000000 1700000003000", "c.1/7")
	f.Add("c.1/7 freed", "c.1/7")
	f.Fuzz(func(t *testing.T, payload, entry string) {
		n, mine := ParseNote(payload, entry)
		target, _, _ := strings.Cut(payload, " ")
		if mine != (target == entry) {
			t.Fatalf("ParseNote(%q, %q) says mine=%v, but the note names %q", payload, entry, mine, target)
		}
		if !mine && n != nil {
			t.Fatalf("a note for another entry was read: %#v", n)
		}
		// What was read is what the scripts would have written for it.
		var canonical string
		switch n := n.(type) {
		case nil:
			return
		case HandOff:
			canonical = entry + " " + strconv.FormatInt(n.Token, 10) + " " + strconv.FormatInt(n.GrantedAt, 10)
		case HeadNotice:
			canonical = entry + " head " + strconv.FormatInt(n.Expiry, 10)
		case Served:
			canonical = entry + " permits " + strconv.FormatInt(n.Token, 10) + " " + strconv.FormatInt(n.GrantedAt, 10) + " " + strconv.FormatInt(n.Expiry, 10)
		case Freed:
			canonical = entry + " freed"
		default:
			t.Fatalf("ParseNote returned %T", n)
		}
		if again, _ := ParseNote(canonical, entry); again != n {
			t.Fatalf("ParseNote(%q) = %#v, but its canonical form %q reads as %#v", payload, n, canonical, again)
		}
	})
}

func FuzzParseOrigin(f *testing.F) {
	f.Add("host\t12\tlabel")
	f.Add("host\tnot a pid\tlabel\twith\ttabs")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		o := ParseOrigin(s)
		if strings.Count(s, "\t") >= 2 {
			if !strings.HasPrefix(s, o.Host+"\t") || !strings.HasSuffix(s, "\t"+o.Label) {
				t.Fatalf("ParseOrigin(%q) = %+v", s, o)
			}
		} else if o.Label != s {
			t.Fatalf("ParseOrigin(%q) = %+v, want the whole text as the label", s, o)
		}
	})
}

// The hub's notes are parsed once, into the values the heartbeat also
// delivers: a note for another entry is not this waiter's, and one that
// cannot be read makes the waiter look again rather than guess.
func TestParseNote(t *testing.T) {
	const me = "owner.1/7"
	for _, tc := range []struct {
		payload string
		want    Note
		mine    bool
	}{
		{me + " 1700000000000001 1700000000123", HandOff{Token: 1700000000000001, GrantedAt: 1700000000123}, true},
		{me + " head 1700000000456", HeadNotice{Expiry: 1700000000456}, true},
		{me + " permits 1700000000000002 1700000000123 1700000003123", Served{Token: 1700000000000002, GrantedAt: 1700000000123, Expiry: 1700000003123}, true},
		{me + " permits 5 1700000000123 1700000000000", nil, true}, // expires before its grant
		{me + " freed", Freed{}, true},
		{"owner.1/8 head 1700000000456", nil, false},
		{"owner.1/70 12 34", nil, false},
		{me, nil, true},
		{me + " head", nil, true},
		{me + " head soon", nil, true},
		{me + " twelve 34", nil, true},
		{"", nil, false},
	} {
		got, mine := ParseNote(tc.payload, me)
		if got != tc.want || mine != tc.mine {
			t.Errorf("ParseNote(%q) = %#v, %v; want %#v, %v", tc.payload, got, mine, tc.want, tc.mine)
		}
	}
}

// Ids say whose they are: an entry's owner is read back from it, and the
// client of an owner or an entry (whose inbox its notes go to).
func TestIDs(t *testing.T) {
	ids := NewIDs()
	client := ids.Client()
	if client == NewIDs().Client() {
		t.Fatal("two owners got one client id")
	}
	owner := ids.HoldID()
	if owner == ids.HoldID() {
		t.Fatal("two handles got one hold id")
	}
	if got := ClientOf(owner); got != client {
		t.Fatalf("ClientOf(%q) = %q, want %q", owner, got, client)
	}
	e1, e2 := ids.Entry(owner), ids.Entry(owner)
	if e1 == e2 || OwnerOfEntry(e1) != owner || OwnerOfEntry(e2) != owner {
		t.Fatalf("entries %q, %q of %q", e1, e2, owner)
	}
	if r := ids.Request(owner); !strings.HasPrefix(r, owner+"#") || r == ids.Request(owner) {
		t.Fatalf("request id %q of %q", r, owner)
	}
	if got := ClientOf(e1); got != client {
		t.Fatalf("ClientOf(%q) = %q, want %q", e1, got, client)
	}
	if got, want := Inbox("fairlock:f:{jobs}:wake", e1), "fairlock:f:{jobs}:wake:"+client; got != want {
		t.Fatalf("Inbox = %q, want %q", got, want)
	}
	if got := ClientOf("no-dot"); got != "no-dot" {
		t.Fatalf("ClientOf of an id without a client part = %q", got)
	}
	if got := OwnerOfEntry("no-slash"); got != "" {
		t.Fatalf("OwnerOfEntry of an id without an owner = %q", got)
	}
}

// A fair lock's attempt sends the words its uncontended path reads, then
// the rest in one word; a semaphore's waiter adds what it asks for, and a
// reentrant waiter packs its own words likewise.
func TestFairAcquireArgs(t *testing.T) {
	a := FairAcquire{Owner: "o", Entry: "o/1", Request: "o#2", Lease: int64(30000), Wait: int64(10000),
		Mode: ModeJoin, Origin: "h\t1\tl", Publish: "PUBLISH", Channel: "fairlock:f:{a lock}:wake", Stale: AnyStale}
	args := a.Args()
	want := []any{"o", "o#2", int64(30000), "h\t1\tl", "o/1 10000 join -1 PUBLISH fairlock:f:{a lock}:wake"}
	if !slices.Equal(args, want) {
		t.Fatalf("a fair lock's attempt sends %q, want %q", args, want)
	}
	// Every word keeps its place, an empty one too (the script splits on spaces).
	empty := a
	empty.Entry = ""
	if got := empty.Args()[4]; got != " 10000 join -1 PUBLISH fairlock:f:{a lock}:wake" {
		t.Fatalf("an attempt with an empty entry sends %q, want the entry's word empty", got)
	}
	a.Permit = PermitRequest{Owner: "p.1", N: 3, Lease: 5000}
	args = a.Args()
	if len(args) != 8 || args[5] != "p.1" || args[6] != 3 || args[7] != int64(5000) {
		t.Fatalf("a gate's attempt sends %v, want the permit request as ARGV[6..8]", args)
	}
	r := ReentrantAcquire{Owner: "o", Request: "o#3", Lease: 30000, Stale: 7, Waiter: "o/4", Wait: 10000, AskFreed: true}
	if got, want := r.Args(), []any{"o", "o#3", 30000, int64(7), "1 o/4 10000"}; !slices.Equal(got, want) {
		t.Fatalf("a reentrant waiter's attempt sends %q, want %q", got, want)
	}
}

func TestReleaseSendsTheTokenAtTheFencesWidth(t *testing.T) {
	for _, c := range []struct {
		token int64
		want  string
	}{
		{1796221944051744, "1796221944051744"},
		{42, "0000000000000042"},
		{0, "0000000000000000"},
		{9999999999999999, "9999999999999999"},
		{12345678901234567, "12345678901234567"}, // past the width: as it is
		{-1, "-1"},
	} {
		if got := TokenText(c.token); got != c.want {
			t.Errorf("TokenText(%d) = %q, want %q", c.token, got, c.want)
		}
	}
	r := Release{Owner: "o", Request: "o#5", Token: 42, Publish: "PUBLISH", Channel: "c"}
	if got, want := r.Args(), []any{"o", "o#5", "0000000000000042", "PUBLISH", "c"}; !slices.Equal(got, want) {
		t.Fatalf("a release sends %q, want %q", got, want)
	}
	r.Undo = "o#4"
	if got := r.Args(); len(got) != 6 || got[2] != "0000000000000042" || got[5] != "o#4" {
		t.Fatalf("an undoing release sends %q, want the token at its width and the request to undo", got)
	}
}

// Inspect reads a queue element's origin and, on a gate, the hold id of
// the permit hold its waiter asks for.
func TestParseElementInfo(t *testing.T) {
	for _, tc := range []struct {
		info, host, label, permitOwner string
		ok                             bool
	}{
		{"30000|10000||h\t12\tl", "h", "l", "", true},
		{"10000|10000|p.1 3 5000|h\t12\tl|with|bars", "h", "l|with|bars", "p.1", true},
		{"30000|10000|h\t12\tl", "", "", "", false}, // layout 4: no request field
		{"", "", "", "", false},
	} {
		o, p, ok := ParseElementInfo(tc.info)
		if ok != tc.ok || o.Host != tc.host || o.Label != tc.label || p.Owner != tc.permitOwner {
			t.Errorf("ParseElementInfo(%q) = %+v, %+v, %v", tc.info, o, p, ok)
		}
	}
	if r := ParseRequest("p.1 3 5000"); r != (PermitRequest{Owner: "p.1", N: 3, Lease: 5000}) {
		t.Errorf("ParseRequest: %+v", r)
	}
	if r := ParseRequest("p.1"); r != (PermitRequest{Owner: "p.1"}) {
		t.Errorf("ParseRequest of an owner alone: %+v", r)
	}
}

// IsNote tells a note's type for its target, and nothing for another id.
func TestIsNote(t *testing.T) {
	handOff := "e1 42 1000"
	if !IsNote[HandOff](handOff, "e1") {
		t.Errorf("%q is not a hand-off for e1", handOff)
	}
	if IsNote[Served](handOff, "e1") {
		t.Errorf("%q reads as permits served", handOff)
	}
	if IsNote[HandOff](handOff, "e2") {
		t.Errorf("%q reads as a hand-off for e2", handOff)
	}
}

// TestSlotMatchesTheClusterSpecification checks Slot against the cluster
// specification's example (CRC16 of "123456789" is 0x31C3) and against
// slots Redis reports for CLUSTER KEYSLOT.
func TestSlotMatchesTheClusterSpecification(t *testing.T) {
	for key, want := range map[string]int64{
		"123456789":            0x31C3 % Slots,
		"foo":                  12182,
		"{user1000}.following": Slot("user1000"),
		"foo{}{bar}":           Slot("foo{}{bar}"),
		"fairlock:{job}":       Slot("job"),
	} {
		if got := Slot(key); got != want {
			t.Errorf("Slot(%q) = %d, want %d", key, got, want)
		}
	}
	if got := Slot("foo{}{bar}"); got == Slot("bar") {
		t.Errorf("an empty first tag must hash the whole key")
	}
	for _, r := range [][2]int64{{0, 5460}, {5461, 10922}, {10923, 16383}, {7000, 7000}} {
		if s := Slot(SessionKey(r[0], r[1])); s < r[0] || s > r[1] {
			t.Errorf("SessionKey(%d, %d) is in slot %d", r[0], r[1], s)
		}
	}
}

package fair

import (
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
	f.Fuzz(func(t *testing.T, payload, entry string) {
		n, mine := parseNote(payload, entry)
		target, _, _ := strings.Cut(payload, " ")
		if mine != (target == entry) {
			t.Fatalf("parseNote(%q, %q) says mine=%v, but the note names %q", payload, entry, mine, target)
		}
		if !mine && n != nil {
			t.Fatalf("a note for another entry was read: %#v", n)
		}
		// What was read is what the scripts would have written for it.
		var canonical string
		switch n := n.(type) {
		case nil:
			return
		case handOff:
			canonical = entry + " " + strconv.FormatInt(n.token, 10) + " " + strconv.FormatInt(n.grantedAt, 10)
		case headNotice:
			canonical = entry + " head " + strconv.FormatInt(n.expiry, 10)
		default:
			t.Fatalf("parseNote returned %T", n)
		}
		if again, _ := parseNote(canonical, entry); again != n {
			t.Fatalf("parseNote(%q) = %#v, but its canonical form %q reads as %#v", payload, n, canonical, again)
		}
	})
}

func FuzzParseInspect(f *testing.F) {
	f.Add(int64(1000), "owner", int64(1), int64(500), int64(7), "host\t12\tlabel", "", "o/1", int64(2000), "30000|10000|host\t12\tl", uint8(10))
	f.Add(int64(0), "", int64(0), int64(0), int64(0), "", "e", "", int64(-1), "", uint8(7))
	f.Add(int64(5), "o", int64(-3), int64(-1), int64(-9), "\t\t", "x", "/", int64(5), "||", uint8(13))
	f.Fuzz(func(t *testing.T, now int64, owner string, count, ttl, token int64, origin, entry, qentry string, deadline int64, info string, n uint8) {
		full := []any{now, owner, count, ttl, token, origin, entry, qentry, deadline, info}
		// Every prefix, and every element of the wrong type.
		v := full[:min(int(n), len(full))]
		if _, err := parseInspect(v); err == nil && len(v) < 7 {
			t.Fatalf("a reply of %d elements was accepted", len(v))
		}
		for i := range v {
			odd := append([]any(nil), v...)
			odd[i] = []byte("not what it should be")
			st, _ := parseInspect(odd)
			for _, w := range st.Queue {
				if w.Expired && w.Deadline > 0 {
					t.Fatalf("an expired waiter with a deadline ahead: %+v", w)
				}
			}
		}
		if st, err := parseInspect(v); err == nil && st.Holder != nil && st.Holder.Owner != owner {
			t.Fatalf("holder %q, want %q", st.Holder.Owner, owner)
		}
	})
}

func FuzzParseOrigin(f *testing.F) {
	f.Add("host\t12\tlabel")
	f.Add("host\tnot a pid\tlabel\twith\ttabs")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		o := parseOrigin(s)
		if strings.Count(s, "\t") >= 2 {
			if !strings.HasPrefix(s, o.Host+"\t") || !strings.HasSuffix(s, "\t"+o.Label) {
				t.Fatalf("parseOrigin(%q) = %+v", s, o)
			}
		} else if o.Label != s {
			t.Fatalf("parseOrigin(%q) = %+v, want the whole text as the label", s, o)
		}
	})
}

package fair

import "testing"

// Values read back from Redis are parsed without trusting them: whatever
// they hold, parsing never panics.

func FuzzParseInspect(f *testing.F) {
	f.Add(int64(1000), "owner", int64(1), int64(500), int64(7), "host\t12\tlabel", "", "", "o/1", int64(2000), "30000|10000||host\t12\tl", uint8(11))
	f.Add(int64(0), "", int64(0), int64(0), int64(0), "", "e", "p", "", int64(-1), "", uint8(8))
	f.Add(int64(5), "o", int64(-3), int64(-1), int64(-9), "\t\t", "x", "p.1", "/", int64(5), "|||", uint8(14))
	f.Fuzz(func(t *testing.T, now int64, owner string, count, ttl, token int64, origin, entry, permitOwner, qentry string, deadline int64, info string, n uint8) {
		full := []any{now, owner, count, ttl, token, origin, entry, permitOwner, qentry, deadline, info}
		// Every prefix, and every element of the wrong type.
		v := full[:min(int(n), len(full))]
		if _, err := parseInspect(v); err == nil && len(v) < 8 {
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

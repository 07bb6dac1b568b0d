package transport

import "testing"

// Replies read back from Redis are parsed without trusting them: elements
// of any type, any number of them, never a panic.
func FuzzReadReplies(f *testing.F) {
	f.Add("owner", int64(1), int64(500), int64(7), "label", uint8(5), uint8(0))
	f.Add("", int64(-1), int64(0), int64(0), "", uint8(0), uint8(255))
	f.Fuzz(func(t *testing.T, owner string, count, ttl, token int64, label string, n, odd uint8) {
		full := []any{owner, count, ttl, token, label}
		v := append([]any(nil), full[:min(int(n), len(full))]...)
		if i := int(odd); i < len(v) {
			v[i] = []any{"nested"} // an element of the wrong type
		}
		if s, err := DecodeState(v); err == nil && len(v) >= 5 && int(odd) >= len(v) && (s.Owner != owner || s.Token != token) {
			t.Fatalf("DecodeState(%v) = %+v", v, s)
		}
		if ints, err := intsOf(v); err == nil {
			for i, x := range ints {
				if v[i] != x {
					t.Fatalf("intsOf(%v)[%d] = %d", v, i, x)
				}
			}
		}
		_, _ = DecodeState("not a list")
		_, _ = intsOf(int64(3))
	})
}

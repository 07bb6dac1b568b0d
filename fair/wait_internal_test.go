package fair

import "testing"

// The hub's notes are parsed once, into the values the heartbeat also
// delivers: a note for another entry is not this waiter's, and one that
// cannot be read makes the waiter look again rather than guess.
func TestParseNote(t *testing.T) {
	const me = "owner.1/7"
	for _, tc := range []struct {
		payload string
		want    any
		mine    bool
	}{
		{me + " 1700000000000001 1700000000123", handOff{token: 1700000000000001, grantedAt: 1700000000123}, true},
		{me + " head 1700000000456", headNotice{expiry: 1700000000456}, true},
		{"owner.1/8 head 1700000000456", nil, false},
		{"owner.1/70 12 34", nil, false},
		{me, nil, true},
		{me + " head", nil, true},
		{me + " head soon", nil, true},
		{me + " twelve 34", nil, true},
		{"", nil, false},
	} {
		got, mine := parseNote(tc.payload, me)
		if got != tc.want || mine != tc.mine {
			t.Errorf("parseNote(%q) = %#v, %v; want %#v, %v", tc.payload, got, mine, tc.want, tc.mine)
		}
	}
}

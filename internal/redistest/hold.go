package redistest

import (
	"encoding/json"
	"testing"

	"github.com/alicebob/miniredis/v2"
)

// Hold reads a lock's hold, the JSON object of strings at key (see
// internal/lua/hold.lua), as a map; nil when the key does not exist.
func Hold(t testing.TB, mr *miniredis.Miniredis, key string) map[string]string {
	t.Helper()
	raw, err := mr.Get(key)
	if err != nil {
		return nil
	}
	var fields map[string]string
	if err := json.Unmarshal([]byte(raw), &fields); err != nil {
		t.Fatalf("hold at %s is not a JSON object of strings: %v (%q)", key, err, raw)
	}
	return fields
}

// HoldField returns one field of a lock's hold, "" when absent.
func HoldField(t testing.TB, mr *miniredis.Miniredis, key, field string) string {
	t.Helper()
	return Hold(t, mr, key)[field]
}

// SetHoldField writes one field of a lock's hold behind the library's back,
// keeping the key's TTL.
func SetHoldField(t testing.TB, mr *miniredis.Miniredis, key, field, value string) {
	t.Helper()
	fields := Hold(t, mr, key)
	if fields == nil {
		fields = map[string]string{}
	}
	fields[field] = value
	raw, err := json.Marshal(fields)
	if err != nil {
		t.Fatal(err)
	}
	ttl := mr.TTL(key)
	if err := mr.Set(key, string(raw)); err != nil {
		t.Fatal(err)
	}
	if ttl > 0 {
		mr.SetTTL(key, ttl)
	}
}

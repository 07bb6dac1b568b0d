package redistest

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/alicebob/miniredis/v2"
)

// The hold's layout (internal/lua/hold.lua): one flat JSON object, in one
// of two forms: as cjson encodes it, or ordered: "~":0, then members in a
// fixed order, the numbers among them at fixed widths, then the fields that
// end with the hold, "~~":0, and the fields that outlive it.
const layout = "8"

// orderedMember is one of the members written first in the ordered form.
type orderedMember struct {
	name  string
	width int // of a fixed-width number; 0: an id or a count, "" when absent
}

// ordered are those members, in order.
var ordered = []orderedMember{{"f", 16}, {"x", 13}, {"h", 13}, {"k", 13}, {"r", 64}, {"q", 0}, {"o", 0}, {"c", 0}, {"a", 0}, {"n", 0}, {"b", 0}}

// isOrdered reports whether name is one of them.
func isOrdered(name string) bool {
	return slices.ContainsFunc(ordered, func(m orderedMember) bool { return m.name == name })
}

// withoutEmptyPlaces is the release memory r without its empty places
// (16 zeros each), as load reads it.
func withoutEmptyPlaces(r string) string {
	for strings.HasSuffix(r, strings.Repeat("0", 16)) {
		r = r[:len(r)-16]
	}
	return r
}

// holdFields end with the hold: written before "~"; the others after it.
var holdFields = map[string]bool{"e": true, "g": true, "po": true, "pn": true, "pl": true, "l": true, "s": true, "pa": true}

// DecodeHold reads a hold's text into its fields, as the scripts' load does
// (absent fields left out; objects such as wa as decoded JSON; r without
// its empty places). A text of another layout gives its members as they
// are, v included.
func DecodeHold(raw string) (map[string]any, error) {
	var t map[string]any
	if err := json.Unmarshal([]byte(raw), &t); err != nil {
		return nil, err
	}
	if t["v"] != layout {
		return t, nil
	}
	if _, ok := t["~"]; !ok { // as cjson encodes it: absent fields left out
		if r, ok := t["r"].(string); ok {
			r = withoutEmptyPlaces(r)
			t["r"] = r
			if r == "" {
				delete(t, "r")
			}
		}
		return t, nil
	}
	if _, ok := t["~~"]; !ok {
		return nil, fmt.Errorf("ordered, but no \"~~\" member")
	}
	delete(t, "~")
	delete(t, "~~")
	for _, f := range ordered {
		text, ok := t[f.name].(string)
		if !ok {
			return nil, fmt.Errorf("member %s is %T", f.name, t[f.name])
		}
		if f.width > 0 && len(text) != f.width {
			return nil, fmt.Errorf("member %s is %q", f.name, text)
		}
		switch {
		case f.name == "r":
			text = withoutEmptyPlaces(text)
		case f.width > 0:
			text = strings.TrimLeft(text, "0")
		}
		if text == "" {
			delete(t, f.name)
		} else {
			t[f.name] = text
		}
	}
	return t, nil
}

// EncodeHold writes fields in the ordered form, which the uncontended
// paths read. Fields whose v is not this layout's are written as a plain
// JSON object, as layouts 2 to 7 were.
func EncodeHold(fields map[string]any) (string, error) {
	if v, ok := fields["v"]; ok && v != layout {
		b, err := json.Marshal(fields)
		return string(b), err
	}
	var out strings.Builder
	out.WriteString(`{"~":0,"v":"8"`)
	member := func(name string, v any) error {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		out.WriteString(`,"` + name + `":`)
		out.Write(b)
		return nil
	}
	for _, f := range ordered {
		text, _ := fields[f.name].(string)
		switch {
		case f.name == "r":
			text = (text + strings.Repeat("0", 64))[:64]
		case f.width > 0:
			n, _ := strconv.ParseInt(text, 10, 64)
			text = fmt.Sprintf("%0*d", f.width, n)
		}
		if err := member(f.name, text); err != nil {
			return "", err
		}
	}
	var hold, lock []string
	for k := range fields {
		switch {
		case k == "v" || isOrdered(k):
		case holdFields[k]:
			hold = append(hold, k)
		default:
			lock = append(lock, k)
		}
	}
	slices.Sort(hold)
	slices.Sort(lock)
	for _, k := range hold {
		if err := member(k, fields[k]); err != nil {
			return "", err
		}
	}
	out.WriteString(`,"~~":0`)
	for _, k := range lock {
		if err := member(k, fields[k]); err != nil {
			return "", err
		}
	}
	out.WriteString("}")
	return out.String(), nil
}

// Hold reads a lock's hold at key (see internal/lua/hold.lua) as a map of
// its fields, objects as their JSON text; nil when the key does not exist.
func Hold(t Fataler, mr *miniredis.Miniredis, key string) map[string]string {
	t.Helper()
	raw, err := mr.Get(key)
	if err != nil {
		return nil
	}
	fields, err := DecodeHold(raw)
	if err != nil {
		t.Fatalf("hold at %s is not of the layout: %v (%q)", key, err, raw)
	}
	out := make(map[string]string, len(fields))
	for k, v := range fields {
		if s, ok := v.(string); ok {
			out[k] = s
			continue
		}
		b, _ := json.Marshal(v)
		out[k] = string(b)
	}
	return out
}

// HoldField returns one field of a lock's hold, "" when absent.
func HoldField(t Fataler, mr *miniredis.Miniredis, key, field string) string {
	t.Helper()
	return Hold(t, mr, key)[field]
}

// SetHoldField writes one field of a lock's hold behind the library's back,
// keeping the key's TTL; "" deletes it.
func SetHoldField(t Fataler, mr *miniredis.Miniredis, key, field, value string) {
	t.Helper()
	fields := map[string]any{}
	if raw, err := mr.Get(key); err == nil {
		if fields, err = DecodeHold(raw); err != nil {
			t.Fatalf("hold at %s is not of the layout: %v (%q)", key, err, raw)
		}
	}
	if value == "" {
		delete(fields, field)
	} else {
		fields[field] = value
	}
	raw, err := EncodeHold(fields)
	if err != nil {
		t.Fatalf("%v", err)
	}
	ttl := mr.TTL(key)
	if err := mr.Set(key, raw); err != nil {
		t.Fatalf("%v", err)
	}
	if ttl > 0 {
		mr.SetTTL(key, ttl)
	}
}

// TakesTheUncontendedPath runs lock and unlock (a Lock that takes the lock
// at once, then its Unlock) and fails t unless the hold at key is in its
// ordered form after each: the form the next uncontended Lock and Unlock
// read and replace whole (hold.lua's take_free and release_own).
func TakesTheUncontendedPath(t Fataler, mr *miniredis.Miniredis, key string, lock, unlock func()) {
	t.Helper()
	for _, step := range []struct {
		name string
		run  func()
	}{{"a Lock", lock}, {"its Unlock", unlock}} {
		step.run()
		if raw, err := mr.Get(key); err != nil || !strings.HasPrefix(raw, `{"~":0,`) {
			t.Fatalf("%s wrote %s (%v); want the ordered form", step.name, raw, err)
		}
	}
}

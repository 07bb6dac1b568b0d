package redistest

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/alicebob/miniredis/v2"
)

// The hold's layout (internal/lua/hold.lua): a JSON object of four members,
// {"v":"8","h":"<header>","b":"<label>","d":{...},"l":{...}}, the header
// holding f, x, h, k and r at fixed widths, then q, o, c, a and n.
const layout = "8"

// headerNumbers are the header's fixed-width fields, in order, and their
// widths; headerIDs follow them.
var (
	headerNumbers = []struct {
		name  string
		width int
	}{{"f", 16}, {"x", 13}, {"h", 13}, {"k", 13}, {"r", 64}}
	headerIDs = []string{"q", "o", "c", "a", "n"}
	// holdFields end with the hold (the member d); the others outlive it (l).
	holdFields = map[string]bool{"e": true, "g": true, "po": true, "pn": true, "pl": true, "l": true, "s": true, "pa": true}
)

// DecodeHold reads a hold's text into its fields, as the scripts' load does
// (absent fields left out; objects such as wa as decoded JSON). A text of
// another layout gives its members as they are, v included.
func DecodeHold(raw string) (map[string]any, error) {
	var t map[string]any
	if err := json.Unmarshal([]byte(raw), &t); err != nil {
		return nil, err
	}
	if t["v"] != layout {
		return t, nil
	}
	out := map[string]any{"v": layout}
	for _, member := range []string{"l", "d"} {
		m, ok := t[member].(map[string]any)
		if !ok && t[member] != nil {
			return nil, fmt.Errorf("member %s is %T", member, t[member])
		}
		for k, v := range m {
			out[k] = v
		}
	}
	header, _ := t["h"].(string)
	parts := strings.Split(header, " ")
	if len(parts) != len(headerNumbers)+len(headerIDs) {
		return nil, fmt.Errorf("header %q has %d fields", header, len(parts))
	}
	for i, f := range headerNumbers {
		if len(parts[i]) != f.width {
			return nil, fmt.Errorf("header field %s is %q", f.name, parts[i])
		}
		if strings.Trim(parts[i], "0") == "" {
			continue
		}
		if f.name == "r" { // the empty places, 16 zeros each, are left out
			r := parts[i]
			for strings.HasSuffix(r, strings.Repeat("0", 16)) {
				r = r[:len(r)-16]
			}
			out["r"] = r
			continue
		}
		n, err := strconv.ParseInt(parts[i], 10, 64)
		if err != nil {
			return nil, err
		}
		out[f.name] = strconv.FormatInt(n, 10)
	}
	for i, name := range headerIDs {
		if v := parts[len(headerNumbers)+i]; v != "" {
			out[name] = v
		}
	}
	if b, _ := t["b"].(string); b != "" {
		out["b"] = b
	}
	return out, nil
}

// EncodeHold writes fields as the scripts' save does. Fields whose v is
// not this layout's are written as a plain JSON object, as layouts 2 to 7
// were.
func EncodeHold(fields map[string]any) (string, error) {
	if v, ok := fields["v"]; ok && v != layout {
		b, err := json.Marshal(fields)
		return string(b), err
	}
	d, l := map[string]any{}, map[string]any{}
	var header []string
	for _, f := range headerNumbers {
		text, _ := fields[f.name].(string)
		if f.name == "r" {
			header = append(header, (text + strings.Repeat("0", 64))[:64])
			continue
		}
		n, _ := strconv.ParseInt(text, 10, 64)
		header = append(header, fmt.Sprintf("%0*d", f.width, n))
	}
	for _, name := range headerIDs {
		text, _ := fields[name].(string)
		header = append(header, text)
	}
	inHeader := map[string]bool{"v": true, "b": true}
	for _, f := range headerNumbers {
		inHeader[f.name] = true
	}
	for _, name := range headerIDs {
		inHeader[name] = true
	}
	for k, v := range fields {
		switch {
		case inHeader[k]:
		case holdFields[k]:
			d[k] = v
		default:
			l[k] = v
		}
	}
	label, _ := fields["b"].(string)
	b, err := json.Marshal(label)
	if err != nil {
		return "", err
	}
	db, err := json.Marshal(d)
	if err != nil {
		return "", err
	}
	lb, err := json.Marshal(l)
	if err != nil {
		return "", err
	}
	return `{"v":"8","h":"` + strings.Join(header, " ") + `","b":` + string(b) + `,"d":` + string(db) + `,"l":` + string(lb) + "}", nil
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

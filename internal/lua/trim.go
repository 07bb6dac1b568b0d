package lua

import (
	"strings"
)

// A script run with EVALSHA (a server without Functions) carries its
// helpers in its own text, and defines every one of them at every call.
// evalText gives it only those it calls: the helper files' top-level
// declarations that its body names, and those they name, in their order.
//
// The helper files are written so that this is sound: each top-level line
// is a declaration at column 0 ("local NAME ..." or "local function
// NAME(...)"), an "end", a comment or blank, and every other line is
// indented, so a declaration runs from its "local" line to the next one;
// none has a side effect. The comments before a declaration go with it.

// decl is one top-level declaration of the helpers.
type decl struct {
	names []string // what it declares
	text  string   // its lines, with the comments before them
	uses  map[string]bool
}

// helperDecls returns the top-level declarations of the helper files of
// src (as Sources returns it), in the order they go in front of a script.
func helperDecls(src map[string]string) []decl {
	var out []decl
	for _, name := range helperFiles {
		out = append(out, declsOf(src[name]+"\n")...)
	}
	return out
}

// declsOf splits helper text into its top-level declarations.
func declsOf(text string) []decl {
	var out []decl
	var pending []string // comments and blanks, for the next declaration
	for _, line := range strings.SplitAfter(text, "\n") {
		switch {
		case strings.HasPrefix(line, "local "):
			out = append(out, decl{names: declared(line), text: strings.Join(pending, "") + line})
			pending = nil
		case len(out) > 0 && line != "" && line[0] != '-' && strings.TrimSpace(line) != "":
			out[len(out)-1].text += strings.Join(pending, "") + line
			pending = nil
		default:
			pending = append(pending, line)
		}
	}
	for i := range out {
		out[i].uses = identifiers(out[i].text)
	}
	return out
}

// declared returns the names a top-level "local" line declares.
func declared(line string) []string {
	rest := strings.TrimPrefix(line, "local ")
	if f, ok := strings.CutPrefix(rest, "function "); ok {
		name, _, _ := strings.Cut(f, "(")
		return []string{strings.TrimSpace(name)}
	}
	lhs, _, _ := strings.Cut(rest, "=")
	var names []string
	for _, n := range strings.Split(lhs, ",") {
		names = append(names, strings.TrimSpace(n))
	}
	return names
}

// identifiers returns the names that code (Lua) mentions outside its
// comments and strings.
func identifiers(code string) map[string]bool {
	out := map[string]bool{}
	var quote byte
	for i := 0; i < len(code); i++ {
		c := code[i]
		switch {
		case quote != 0:
			switch c {
			case '\\':
				i++
			case quote, '\n':
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '-' && i+1 < len(code) && code[i+1] == '-':
			for i < len(code) && code[i] != '\n' {
				i++
			}
		case isIdentStart(c):
			j := i + 1
			for j < len(code) && (isIdentStart(code[j]) || code[j] >= '0' && code[j] <= '9') {
				j++
			}
			if i == 0 || code[i-1] != '.' && code[i-1] != ':' { // not a field
				out[code[i:j]] = true
			}
			i = j - 1
		}
	}
	return out
}

func isIdentStart(c byte) bool { return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// evalText returns body with the declarations of helpers it reaches put in
// front of it, in their order.
func evalText(helpers []decl, body string) string {
	need := identifiers(body)
	keep := make([]bool, len(helpers))
	for changed := true; changed; {
		changed = false
		for i := len(helpers) - 1; i >= 0; i-- {
			if keep[i] {
				continue
			}
			for _, n := range helpers[i].names {
				if need[n] {
					keep[i], changed = true, true
					for u := range helpers[i].uses {
						need[u] = true
					}
					break
				}
			}
		}
	}
	var b strings.Builder
	for i, d := range helpers {
		if keep[i] {
			b.WriteString(d.text)
		}
	}
	b.WriteString(body)
	return b.String()
}

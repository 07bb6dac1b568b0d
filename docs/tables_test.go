package docs_test

import (
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The tables of the docs name fairlock's calls in code spans, outside any
// ```go block, so no compiler reads them: `multi.NewRedLock(clients, name)`
// stood in migrating.md for a function that takes owners. This test reads
// the module's exported API from its source and checks every such mention
// in a table of docs/*.md and the README:
//
//   - pkg.Name (pkg one of fairlock's packages) names an exported
//     identifier of that package; pkg.Name(args) a function that takes that
//     many arguments;
//   - Type.Method(args), Type one of fairlock's exported types, a method
//     of a type of that name that takes that many;
//   - in the fairlock column of a migration table (its header says
//     "fairlock"), a bare Name(args) or Name too: a method or function of
//     fairlock's that takes that many, or an exported name;
//   - an argument written as a placeholder (ctx, owner, owners, client,
//     name, wait, lease, n, ...) has the type of the parameter it stands
//     for: owners for a []*fairlock.Owner, clients for a
//     []redis.UniversalClient.

// apiPackages are the packages a mention may qualify a name with, and
// where their source is, from docs/.
var apiPackages = map[string]string{
	"fairlock":     "..",
	"fair":         "../fair",
	"reentrant":    "../reentrant",
	"multi":        "../multi",
	"observe":      "../observe",
	"fairlocktest": "../fairlocktest",
}

// placeholders are the words the tables write for an argument, and the
// type (as the source spells it, less a "fairlock." qualifier) of the
// parameter each may stand for.
var placeholders = map[string][]string{
	"ctx":     {"context.Context"},
	"owner":   {"*Owner"},
	"owners":  {"[]*Owner"},
	"client":  {"redis.UniversalClient"},
	"clients": {"[]redis.UniversalClient", "[]*redis.Client"},
	"name":    {"string"},
	"key":     {"string"},
	"n":       {"int"},
	"k":       {"int"},
	"wait":    {"time.Duration"},
	"lease":   {"time.Duration"},
	"ttl":     {"time.Duration"},
	"d":       {"time.Duration"},
	"fn":      {"func(ctx context.Context) error"},
}

// signature is one function or method: its parameters' types, the last
// variadic if variadic.
type signature struct {
	params   []string
	variadic bool
}

// api is what the packages export: names by package, functions by package
// and name, methods by name and by receiver type and name.
type api struct {
	names     map[string]map[string]bool
	funcs     map[string]map[string][]signature
	methods   map[string][]signature
	typeMeths map[string][]signature // "Type.Method"
	types     map[string]bool        // exported type names, any package
	checked   int                    // mentions checked so far
}

func readAPI(t *testing.T) *api {
	t.Helper()
	a := &api{names: map[string]map[string]bool{}, funcs: map[string]map[string][]signature{},
		methods: map[string][]signature{}, typeMeths: map[string][]signature{}, types: map[string]bool{}}
	for pkg, dir := range apiPackages {
		a.names[pkg], a.funcs[pkg] = map[string]bool{}, map[string][]signature{}
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no Go files in %s: %v", dir, err)
		}
		fset := token.NewFileSet()
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			for _, decl := range file.Decls {
				switch d := decl.(type) {
				case *ast.FuncDecl:
					if !d.Name.IsExported() {
						continue
					}
					sig := signatureOf(fset, d.Type)
					if d.Recv == nil {
						a.names[pkg][d.Name.Name] = true
						a.funcs[pkg][d.Name.Name] = append(a.funcs[pkg][d.Name.Name], sig)
						continue
					}
					recv := d.Recv.List[0].Type
					if s, ok := recv.(*ast.StarExpr); ok {
						recv = s.X
					}
					if id, ok := recv.(*ast.Ident); ok && id.IsExported() {
						a.methods[d.Name.Name] = append(a.methods[d.Name.Name], sig)
						a.typeMeths[id.Name+"."+d.Name.Name] = append(a.typeMeths[id.Name+"."+d.Name.Name], sig)
					}
				case *ast.GenDecl:
					for _, spec := range d.Specs {
						switch s := spec.(type) {
						case *ast.TypeSpec:
							if s.Name.IsExported() {
								a.names[pkg][s.Name.Name] = true
								a.types[s.Name.Name] = true
							}
						case *ast.ValueSpec:
							for _, n := range s.Names {
								if n.IsExported() {
									a.names[pkg][n.Name] = true
								}
							}
						}
					}
				}
			}
		}
	}
	return a
}

func signatureOf(fset *token.FileSet, ft *ast.FuncType) signature {
	var sig signature
	for _, field := range ft.Params.List {
		typ := field.Type
		if e, ok := typ.(*ast.Ellipsis); ok {
			sig.variadic = true
			typ = e.Elt
		}
		var b strings.Builder
		_ = printer.Fprint(&b, fset, typ)
		text := strings.ReplaceAll(b.String(), "fairlock.", "")
		for range max(len(field.Names), 1) {
			sig.params = append(sig.params, text)
		}
	}
	return sig
}

// fits reports whether args (as written in a table) can be a call of sig.
func (sig signature) fits(args []string) bool {
	n := len(sig.params)
	switch {
	case sig.variadic && len(args) < n-1:
		return false
	case !sig.variadic && len(args) != n:
		return false
	}
	for i, arg := range args {
		want := ""
		switch {
		case i < n-1 || (i == n-1 && !sig.variadic):
			want = sig.params[i]
		case sig.variadic:
			want = sig.params[n-1]
			if spread, ok := strings.CutSuffix(arg, "..."); ok {
				arg, want = spread, "[]"+want
			}
		}
		if types, ok := placeholders[arg]; ok && !slices.Contains(types, want) {
			return false
		}
	}
	return true
}

// A table mention: an identifier, maybe qualified, maybe called.
var (
	codeSpan = regexp.MustCompile("`([^`]+)`")
	ident    = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)?`)
)

// mention is one name in a code span, with its arguments if called.
type mention struct {
	qual, name string
	called     bool
	args       []string
}

// mentions lists the names of span that start with a letter not after a
// dot or a word character, each with the arguments of its call.
func mentions(span string) []mention {
	var out []mention
	for _, loc := range ident.FindAllStringIndex(span, -1) {
		if loc[0] > 0 {
			if c := span[loc[0]-1]; c == '.' || c == '_' || c == '"' || c >= '0' && c <= '9' {
				continue
			}
		}
		m := mention{name: span[loc[0]:loc[1]]}
		if q, n, ok := strings.Cut(m.name, "."); ok {
			m.qual, m.name = q, n
		}
		if m.name[0] < 'A' || m.name[0] > 'Z' {
			continue // not an exported name: a file (fair.go), a metric (fairlock.hold.duration), a variable
		}
		if loc[1] < len(span) && span[loc[1]] == '(' {
			if args, ok := callArgs(span[loc[1]:]); ok {
				m.called, m.args = true, args
			}
		}
		out = append(out, m)
	}
	return out
}

// callArgs splits the arguments of the call that s opens with "(", at its
// top-level commas.
func callArgs(s string) ([]string, bool) {
	depth, start := 0, 1
	var args []string
	for i, c := range s {
		switch c {
		case '(', '[', '{':
			depth++
		case ')', ']', '}':
			depth--
			if depth == 0 {
				if a := strings.TrimSpace(s[start:i]); a != "" || len(args) > 0 {
					args = append(args, a)
				}
				return args, true
			}
		case ',':
			if depth == 1 {
				args = append(args, strings.TrimSpace(s[start:i]))
				start = i + 1
			}
		}
	}
	return nil, false
}

// cells splits a table row at the bars that are not escaped.
func cells(row string) []string {
	row = strings.TrimSpace(row)
	row = strings.TrimPrefix(row, "|")
	row = strings.TrimSuffix(row, "|")
	var out []string
	var b strings.Builder
	for i := 0; i < len(row); i++ {
		switch {
		case row[i] == '\\' && i+1 < len(row) && row[i+1] == '|':
			b.WriteByte('|')
			i++
		case row[i] == '|':
			out = append(out, b.String())
			b.Reset()
		default:
			b.WriteByte(row[i])
		}
	}
	return append(out, b.String())
}

// check returns what is wrong with m, a mention in a table ("" if
// nothing); bare: the mention stands in a fairlock column, where a bare
// Name is fairlock's.
func (a *api) check(m mention, bare bool) string {
	fits := func(sigs []signature) bool {
		return slices.ContainsFunc(sigs, func(s signature) bool { return s.fits(m.args) })
	}
	switch {
	case a.names[m.qual] != nil: // pkg.Name
		a.checked++
		switch {
		case !a.names[m.qual][m.name]:
			return "package " + m.qual + " exports no " + m.name
		case m.called && a.funcs[m.qual][m.name] == nil:
			return m.qual + "." + m.name + " is not a function"
		case m.called && !fits(a.funcs[m.qual][m.name]):
			return m.qual + "." + m.name + " takes no such arguments: " + describe(a.funcs[m.qual][m.name])
		}
	case m.qual != "" && a.types[m.qual]: // Type.Method
		a.checked++
		sigs := a.typeMeths[m.qual+"."+m.name]
		switch {
		case sigs == nil:
			return "no type " + m.qual + " of fairlock's has a method " + m.name
		case m.called && !fits(sigs):
			return m.qual + "." + m.name + " takes no such arguments: " + describe(sigs)
		}
	case m.qual == "" && bare:
		a.checked++
		sigs := a.methods[m.name]
		for pkg := range a.funcs {
			sigs = append(sigs, a.funcs[pkg][m.name]...)
		}
		exported := false
		for _, names := range a.names {
			exported = exported || names[m.name]
		}
		switch {
		case !m.called && (sigs != nil || exported):
		case sigs == nil:
			return "fairlock has no method or function " + m.name
		case !fits(sigs):
			return m.name + " takes no such arguments: " + describe(sigs)
		}
	}
	return ""
}

func describe(sigs []signature) string {
	var out []string
	for _, s := range sigs {
		p := slices.Clone(s.params)
		if s.variadic {
			p[len(p)-1] = "..." + p[len(p)-1]
		}
		out = append(out, "("+strings.Join(p, ", ")+")")
	}
	return strings.Join(out, " or ")
}

// tableSlips returns, for the markdown text, every mention in its tables
// that names no part of fairlock's API as written.
func (a *api) tableSlips(text string) []string {
	var slips []string
	fairCol := -1
	inTable := false
	for i, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "|") {
			inTable = false
			continue
		}
		row := cells(line)
		if !inTable { // the header
			inTable, fairCol = true, -1
			if last := len(row) - 1; strings.TrimSpace(row[last]) == "fairlock" {
				fairCol = last
			}
			continue
		}
		for c, cell := range row {
			for _, span := range codeSpan.FindAllStringSubmatch(cell, -1) {
				for _, m := range mentions(span[1]) {
					if why := a.check(m, c == fairCol); why != "" {
						slips = append(slips, "line "+strconv.Itoa(i+1)+": `"+span[1]+"`: "+why)
					}
				}
			}
		}
	}
	return slips
}

// Every call and name of fairlock's in a table of the docs exists, with
// the arguments the table gives it.
func TestTablesNameFairlocksAPIAsItIs(t *testing.T) {
	a := readAPI(t)
	pages, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, "../README.md")
	checked := 0
	for _, page := range pages {
		text, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, slip := range a.tableSlips(string(text)) {
			t.Errorf("%s, %s", page, slip)
		}
		checked++
	}
	if checked < 10 || a.checked < 50 {
		t.Fatalf("checked %d mentions on %d pages; expected docs/*.md and the README, and over 50", a.checked, checked)
	}
	t.Logf("%d mentions checked on %d pages", a.checked, checked)
}

// The check catches the slips it is for, and passes what is right.
func TestTablesCheckCatchesSlips(t *testing.T) {
	a := readAPI(t)
	const page = `| redsync | fairlock |
|---|---|
| several pools (Redlock) | ` + "`multi.NewRedLock(clients, name)`" + ` |
| one | ` + "`fair.NewMutex(owner, name)`" + ` |
| two | ` + "`TryLock(ctx, 0)`" + ` |
| three | ` + "`Permit.Renew(ctx)`" + ` |
| four | ` + "`TryAcquire(ctx, n, wait, lease)`, `multi.NewRedLock(owners, name)`, `Permit.Release(ctx)`, `owner, _ := fairlock.NewOwner(client)`, `multi.New(locks...)`" + ` |
| ` + "`TryLock()`, `Until()`" + ` | ` + "`TTL(ctx)`" + ` |
`
	slips := a.tableSlips(page)
	want := []string{"NewRedLock takes no such", "exports no NewMutex", "TryLock takes no such", "has a method Renew"}
	if len(slips) != len(want) {
		t.Fatalf("slips found: %q; want one each for %q", slips, want)
	}
	for i, w := range want {
		if !strings.Contains(slips[i], w) {
			t.Errorf("slip %d: %q, want one saying %q", i, slips[i], w)
		}
	}
}

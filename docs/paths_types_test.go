package docs_test

import (
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// What a reader meets on a path, beyond its functions: the module's named
// types it must learn to follow the path, and the calls through an
// interface, where the reader must find which implementation runs. Both
// are read from the code the path ran: each function's signature, and the
// lines of its blocks that the workload counted.

// pathReading is what a reader meets on one path.
type pathReading struct {
	types      []string // the module's named types, qualified, sorted
	interfaces int      // call sites through an interface's method
}

// typedModule is the module's packages that hold a path's functions, type
// checked (their files without tests) against the export data of what
// they import.
type typedModule struct {
	fset  *token.FileSet
	files map[string]*ast.File // by the file's path in the module
	info  *types.Info
}

// checkModule type-checks the packages in dirs (paths in the module, "."
// for the root).
func checkModule(t *testing.T, dirs []string) *typedModule {
	t.Helper()
	list := exec.Command("go", "list", "-export", "-deps", "-f", "{{.ImportPath}}\t{{.Export}}", "./...")
	list.Dir = ".."
	out, err := list.Output()
	if err != nil {
		t.Fatalf("go list -export: %v", err)
	}
	exports := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if path, file, ok := strings.Cut(line, "\t"); ok && file != "" {
			exports[path] = file
		}
	}
	m := &typedModule{fset: token.NewFileSet(), files: map[string]*ast.File{}, info: &types.Info{
		Types:      map[ast.Expr]types.TypeAndValue{},
		Uses:       map[*ast.Ident]types.Object{},
		Defs:       map[*ast.Ident]types.Object{},
		Selections: map[*ast.SelectorExpr]*types.Selection{},
	}}
	imp := importer.ForCompiler(m.fset, "gc", func(path string) (io.ReadCloser, error) {
		return os.Open(exports[path])
	})
	for _, dir := range dirs {
		names, err := filepath.Glob(filepath.Join("..", dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		var files []*ast.File
		for _, name := range names {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(m.fset, name, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			rel, _ := filepath.Rel("..", name)
			m.files[filepath.ToSlash(rel)] = f
			files = append(files, f)
		}
		path := strings.TrimSuffix(modulePrefix+dir, "/.")
		conf := types.Config{Importer: imp}
		if _, err := conf.Check(path, m.fset, files, m.info); err != nil {
			t.Fatalf("type-checking %s: %v", path, err)
		}
	}
	return m
}

// read returns what a reader meets on path, whose counted blocks are ran.
func (m *typedModule) read(path []fn, ran map[covBlock]bool) pathReading {
	seen := map[string]bool{}
	var r pathReading
	for _, f := range path {
		file := m.files[f.file]
		var decl *ast.FuncDecl
		for _, d := range file.Decls {
			if d, ok := d.(*ast.FuncDecl); ok && m.fset.Position(d.Pos()).Line == f.start {
				decl = d
			}
		}
		if decl == nil {
			continue
		}
		lines := ranLines(f, ran)
		bodyStart := m.fset.Position(decl.Body.Lbrace).Line
		ast.Inspect(decl, func(n ast.Node) bool {
			if n == nil {
				return false
			}
			line := m.fset.Position(n.Pos()).Line
			if line > bodyStart && !lines[line] {
				return true // a block the path did not run; its inner blocks may have
			}
			switch n := n.(type) {
			case *ast.Ident:
				if tn, ok := m.info.Uses[n].(*types.TypeName); ok && tn.Pkg() != nil && ownPackage(tn.Pkg().Path()) && !isTypeParam(tn) {
					seen[filepath.Base(tn.Pkg().Path())+"."+tn.Name()] = true
				}
			case *ast.CallExpr:
				if sel, ok := n.Fun.(*ast.SelectorExpr); ok {
					if s := m.info.Selections[sel]; s != nil && s.Kind() == types.MethodVal && types.IsInterface(s.Recv()) {
						r.interfaces++
					}
				}
			}
			return true
		})
		// The receiver's type, named in the signature.
		if decl.Recv != nil {
			if tn, ok := m.info.Defs[decl.Name].(*types.Func); ok {
				if recv := tn.Type().(*types.Signature).Recv(); recv != nil {
					t := recv.Type()
					if p, ok := t.(*types.Pointer); ok {
						t = p.Elem()
					}
					if named, ok := t.(*types.Named); ok && named.Obj().Pkg() != nil {
						seen[filepath.Base(named.Obj().Pkg().Path())+"."+named.Obj().Name()] = true
					}
				}
			}
		}
	}
	for name := range seen {
		r.types = append(r.types, name)
	}
	slices.Sort(r.types)
	return r
}

// ownPackage reports whether an import path is one of the module's.
func ownPackage(path string) bool {
	return path == strings.TrimSuffix(modulePrefix, "/") || strings.HasPrefix(path, modulePrefix)
}

// isTypeParam reports whether tn names a type parameter, which the reader
// learns with its function, not as a type of the module.
func isTypeParam(tn *types.TypeName) bool {
	_, ok := tn.Type().(*types.TypeParam)
	return ok
}

// ctxStops follows the caller's ctx from the path's first function (start,
// a function's qualified name): every call the path ran that passes a
// context.Context, or the core.Turn that carries the caller's ctx
// (Turn.Context), to a function of the path is a stop in that function's
// file, and after it the reader is back in the caller's file. It returns
// the stops' files in order, the files the reader is in, in order (the
// caller's again after each call it made), the names the ctx goes by (the
// parameters it arrives in, and the expressions it is passed as), and how
// many times the reader came back to a file it had left. A call through
// an interface stops at each of the path's methods that implement it; a
// call through a func value, at each of the path's functions of its type.
func (m *typedModule) ctxStops(path []fn, ran map[covBlock]bool, start string) (stops, files, names []string, returns int) {
	byName := map[string]fn{}     // a *types.Func's full name
	funcs := map[fn]*types.Func{} // f's object
	decls := map[fn]*ast.FuncDecl{}
	var first fn
	for _, f := range path {
		for _, d := range m.files[f.file].Decls {
			if d, ok := d.(*ast.FuncDecl); ok && m.fset.Position(d.Pos()).Line == f.start {
				decls[f] = d
				if obj, ok := m.info.Defs[d.Name].(*types.Func); ok {
					byName[obj.FullName()] = f
					funcs[f] = obj
				}
			}
		}
		if f.qualified() == start {
			first = f
		}
	}
	isCtx := func(e ast.Expr) bool {
		tv, ok := m.info.Types[e]
		return ok && tv.Type != nil && tv.Type.String() == "context.Context"
	}
	carriesCtx := func(e ast.Expr) bool {
		tv, ok := m.info.Types[e]
		return isCtx(e) || ok && tv.Type != nil && tv.Type.String() == "*"+modulePrefix+"internal/core.Turn"
	}
	qualify := func(p *types.Package) string { return p.Path() }
	callees := func(call *ast.CallExpr) []fn {
		var obj types.Object
		switch fun := call.Fun.(type) {
		case *ast.Ident:
			obj = m.info.Uses[fun]
		case *ast.SelectorExpr:
			if s := m.info.Selections[fun]; s != nil {
				obj = s.Obj()
				if iface, ok := s.Recv().Underlying().(*types.Interface); ok {
					var out []fn
					for _, f := range path {
						if tf := funcs[f]; tf != nil && tf.Name() == fun.Sel.Name && implements(tf.Type().(*types.Signature).Recv().Type(), iface) {
							out = append(out, f)
						}
					}
					return out
				}
			} else {
				obj = m.info.Uses[fun.Sel]
			}
		}
		if v, ok := obj.(*types.Var); ok {
			// A func value: any of the path's functions of its type (by
			// text: the packages are type-checked one by one).
			var out []fn
			for _, f := range path {
				if tf := funcs[f]; tf != nil && tf.Type().(*types.Signature).Recv() == nil &&
					types.TypeString(tf.Type(), qualify) == types.TypeString(v.Type().Underlying(), qualify) {
					out = append(out, f)
				}
			}
			return out
		}
		tf, ok := obj.(*types.Func)
		if !ok {
			return nil
		}
		if f, ok := byName[tf.Origin().FullName()]; ok {
			return []fn{f}
		}
		return nil
	}
	var walk func(f fn, stack []fn)
	walk = func(f fn, stack []fn) {
		stops = append(stops, f.file)
		files = append(files, f.file)
		d := decls[f]
		if d == nil {
			return
		}
		for _, field := range d.Type.Params.List {
			for _, name := range field.Names {
				if obj := m.info.Defs[name]; obj != nil && obj.Type().String() == "context.Context" && !slices.Contains(names, name.Name) {
					names = append(names, name.Name)
				}
			}
		}
		lines := ranLines(f, ran)
		bodyStart := m.fset.Position(d.Body.Lbrace).Line
		ast.Inspect(d.Body, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			if line := m.fset.Position(call.Pos()).Line; line > bodyStart && !lines[line] {
				return true
			}
			if !slices.ContainsFunc(call.Args, carriesCtx) {
				return true
			}
			for _, arg := range call.Args {
				if text := types.ExprString(arg); isCtx(arg) && len(callees(call)) > 0 && !slices.Contains(names, text) {
					names = append(names, text)
				}
			}
			for _, g := range callees(call) {
				if slices.Contains(stack, g) || g == f {
					continue
				}
				walk(g, append(stack, f))
				files = append(files, f.file) // back in the caller
			}
			return true
		})
	}
	if first.file == "" {
		return nil, nil, nil, 0
	}
	walk(first, nil)
	return stops, files, names, comebacks(files)
}

// comebacks counts the moves in files into a file that was left before.
func comebacks(files []string) int {
	n := 0
	left := map[string]bool{}
	for i := 1; i < len(files); i++ {
		if files[i] != files[i-1] {
			left[files[i-1]] = true
			if left[files[i]] {
				n++
			}
		}
	}
	return n
}

// ranLines returns the lines of f that the path's counted blocks cover.
func ranLines(f fn, ran map[covBlock]bool) map[int]bool {
	lines := map[int]bool{}
	for b := range ran {
		if b.file == f.file && f.start <= b.start && b.stop <= f.stop {
			for l := b.start; l <= b.stop; l++ {
				lines[l] = true
			}
		}
	}
	return lines
}

// implements reports whether t has every method of iface, by name and
// signature as text: the module's packages are type-checked one by one, so
// an interface and a type of two of them may name one type by two objects.
func implements(t types.Type, iface *types.Interface) bool {
	qualify := func(p *types.Package) string { return p.Path() }
	ms := types.NewMethodSet(t)
	for i := range iface.NumMethods() {
		want := iface.Method(i)
		found := false
		for j := range ms.Len() {
			got := ms.At(j).Obj()
			if got.Name() == want.Name() && types.TypeString(got.Type(), qualify) == types.TypeString(want.Type(), qualify) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

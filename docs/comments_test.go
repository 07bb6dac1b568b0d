package docs_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// maxCommentShare bounds the comments of every package, so that its code
// is read with its comments, not through them: the design and its reasons
// live in docs/, which the code's comments point to.
const maxCommentShare = 0.25

// TestCommentShare checks that in every package of the repository (the
// nested modules' too), comment lines are at most maxCommentShare of its
// non-blank lines. A package is read with its tests, which are its
// specification, so they count; doc.go does not: it holds only the
// package's documentation, what go doc shows first. The internal packages
// keep to the bound without their tests too (the public ones are over it
// there by their exported names' doc comments, which go doc shows). It
// logs each package's share, and the share without its tests beside it.
func TestCommentShare(t *testing.T) {
	type share struct{ lines, comments, libLines, libComments int }
	pkgs := map[string]*share{}
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != ".." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || d.Name() == "doc.go" {
			return nil
		}
		lines, comments, err := commentLines(path)
		if err != nil {
			return err
		}
		s := pkgs[filepath.Dir(path)]
		if s == nil {
			s = &share{}
			pkgs[filepath.Dir(path)] = s
		}
		s.lines += lines
		s.comments += comments
		if !strings.HasSuffix(path, "_test.go") {
			s.libLines += lines
			s.libComments += comments
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) < 20 {
		t.Fatalf("found %d packages; is the test run from docs/?", len(pkgs))
	}
	dirs := slices.Sorted(func(yield func(string) bool) {
		for d := range pkgs {
			if !yield(d) {
				return
			}
		}
	})
	for _, d := range dirs {
		s := pkgs[d]
		got := float64(s.comments) / float64(s.lines)
		lib := 0.0
		if s.libLines > 0 {
			lib = float64(s.libComments) / float64(s.libLines)
		}
		t.Logf("%-28s %5.1f %% of %5d lines (without its tests: %5.1f %% of %5d)", d, 100*got, s.lines, 100*lib, s.libLines)
		if got > maxCommentShare {
			t.Errorf("%s: comments are %.1f %% of its %d non-blank lines (doc.go aside), over %.0f %%: say it in docs/ and point there",
				d, 100*got, s.lines, 100*maxCommentShare)
		}
		if strings.HasPrefix(d, "../internal/") && lib > maxCommentShare {
			t.Errorf("%s: without its tests, comments are %.2f %% of its %d non-blank lines, over %.0f %%",
				d, 100*lib, s.libLines, 100*maxCommentShare)
		}
	}
}

// commentLines counts a Go file's non-blank lines and those among them
// that hold only a comment.
func commentLines(path string) (lines, comments int, err error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, err
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, parser.ParseComments)
	if err != nil {
		return 0, 0, err
	}
	inComment := map[int]bool{}
	for _, g := range f.Comments {
		for _, c := range g.List {
			for l := fset.Position(c.Pos()).Line; l <= fset.Position(c.End()).Line; l++ {
				inComment[l] = true
			}
		}
	}
	for i, line := range strings.Split(string(src), "\n") {
		text := strings.TrimSpace(line)
		if text == "" {
			continue
		}
		lines++
		if inComment[i+1] && (strings.HasPrefix(text, "//") || strings.HasPrefix(text, "/*") || strings.HasPrefix(text, "*")) {
			comments++
		}
	}
	return lines, comments, nil
}

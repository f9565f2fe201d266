package codesize

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// decodePath lists the packages (directories below the module root) whose
// functions take at most MaxDecodeParams parameters.
var decodePath = map[string]bool{"loader": true, "format": true}

// hasReason reports whether a doc comment explains a long function: one of
// its paragraphs starts with "Length:".
func hasReason(doc *ast.CommentGroup) bool {
	if doc == nil {
		return false
	}
	for _, para := range strings.Split(doc.Text(), "\n\n") {
		if strings.HasPrefix(strings.TrimSpace(para), "Length:") {
			return true
		}
	}
	return false
}

func params(ft *ast.FuncType) int {
	n := 0
	for _, f := range ft.Params.List {
		n += max(len(f.Names), 1)
	}
	return n
}

func TestSizes(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	files := 0
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			// Hidden directories (.git, .venv) and testdata hold no module code.
			if p != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		f, err := parser.ParseFile(fset, p, nil, parser.ParseComments)
		if err != nil {
			t.Errorf("%s: %v", rel, err)
			return nil
		}
		files++
		if n := fset.File(f.Pos()).LineCount(); n > MaxFileLines {
			t.Errorf("%s has %d lines, over %d: split it by topic", rel, n, MaxFileLines)
		}
		pkg := strings.Split(filepath.ToSlash(rel), "/")[0]
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1
			if n > MaxFuncLines && !hasReason(fd.Doc) {
				t.Errorf("%s: func %s has %d lines, over %d, and its doc comment gives no reason (a paragraph starting \"Length:\"): split it or say why not",
					rel, fd.Name.Name, n, MaxFuncLines)
			}
			if decodePath[pkg] && params(fd.Type) > MaxDecodeParams {
				t.Errorf("%s: func %s takes %d parameters, over %d in the decode path: group them in a struct",
					rel, fd.Name.Name, params(fd.Type), MaxDecodeParams)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 50 {
		t.Fatalf("walked %d Go files from %s: the walk missed the module", files, root)
	}
}

func TestHasReason(t *testing.T) {
	for _, tc := range []struct {
		doc  string
		want bool
	}{
		{"", false},
		{"f does a thing.\n", false},
		{"f does a thing.\n\nLength: one flat list of checks.\n", true},
		{"f mentions Length: in passing.\n", false},
	} {
		var cg *ast.CommentGroup
		if tc.doc != "" {
			var list []*ast.Comment
			for _, l := range strings.Split(strings.TrimSuffix(tc.doc, "\n"), "\n") {
				list = append(list, &ast.Comment{Text: "// " + l})
			}
			cg = &ast.CommentGroup{List: list}
		}
		if got := hasReason(cg); got != tc.want {
			t.Errorf("hasReason(%q) = %v, want %v", tc.doc, got, tc.want)
		}
	}
}

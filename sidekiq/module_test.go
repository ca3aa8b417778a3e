package sidekiq_test

import (
	"fmt"
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

// exportedBudget bounds the module's public surface, as counted by
// publicSurface: every exported name is a promise to users, so a new one
// should replace an old one or earn a raise of the budget here.
const exportedBudget = 450

// publicSurface counts the exported identifiers of the packages a user of
// the module can import: every package except those under an internal/
// directory, cmd/, examples/, compat_test/ and testdata/, in non-test .go
// files. It counts, per package:
//   - exported top-level funcs, types, vars and consts (one per name);
//   - exported methods whose receiver is an exported type.
//
// It does not count struct fields or interface methods. It returns the
// total and the count per package.
func publicSurface(t *testing.T, root string) (int, map[string]int) {
	t.Helper()
	perPkg := map[string]int{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "internal") {
			return filepath.SkipDir
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if first, _, _ := strings.Cut(rel, "/"); first == "cmd" || first == "examples" || first == "compat_test" {
			return filepath.SkipDir
		}
		bp, err := build.ImportDir(path, 0)
		if err != nil {
			if _, ok := err.(*build.NoGoError); ok {
				return nil
			}
			return err
		}
		if bp.Name == "main" {
			return nil
		}
		n, err := countExported(path, bp.GoFiles)
		if err != nil {
			return err
		}
		perPkg[rel] = n
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, n := range perPkg {
		total += n
	}
	return total, perPkg
}

func countExported(dir string, files []string) (int, error) {
	fset := token.NewFileSet()
	n := 0
	for _, f := range files {
		file, err := parser.ParseFile(fset, filepath.Join(dir, f), nil, parser.SkipObjectResolution)
		if err != nil {
			return 0, err
		}
		for _, decl := range file.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				if d.Recv == nil || receiverExported(d.Recv.List[0].Type) {
					n++
				}
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							n++
						}
					case *ast.ValueSpec:
						for _, id := range s.Names {
							if id.IsExported() {
								n++
							}
						}
					}
				}
			}
		}
	}
	return n, nil
}

func receiverExported(x ast.Expr) bool {
	for {
		switch e := x.(type) {
		case *ast.StarExpr:
			x = e.X
		case *ast.IndexExpr:
			x = e.X
		case *ast.IndexListExpr:
			x = e.X
		case *ast.Ident:
			return e.IsExported()
		default:
			return false
		}
	}
}

func TestExportedIdentifiersWithinBudget(t *testing.T) {
	total, perPkg := publicSurface(t, "..")
	pkgs := slices.Collect(maps.Keys(perPkg))
	sort.Slice(pkgs, func(i, j int) bool { return perPkg[pkgs[i]] > perPkg[pkgs[j]] })
	var b strings.Builder
	for _, p := range pkgs {
		fmt.Fprintf(&b, "\n  %s: %d", p, perPkg[p])
	}
	t.Logf("%d exported identifiers, budget %d; per package:%s", total, exportedBudget, b.String())
	if total <= exportedBudget {
		return
	}
	t.Errorf("%d exported identifiers, budget %d (see publicSurface); per package:%s", total, exportedBudget, b.String())
}

// Packages under an internal/ directory are building blocks of the layers
// above them; the command line (cli) and the dashboard (web) sit on top, so
// no internal package, nor its tests, imports them. Programs that need cli
// (the bench, test binaries) live under cmd/ or cli/internal/.
func TestInternalPackagesImportNoCommand(t *testing.T) {
	const module = "github.com/gojob/gojob/"
	top := []string{module + "cli", module + "web"}
	checked := 0
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if path != ".." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		rel := filepath.ToSlash(strings.TrimPrefix(path, "../"))
		if !strings.HasPrefix(rel, "internal/") && !strings.Contains(rel, "/internal/") {
			return nil
		}
		if strings.HasPrefix(rel, "cli/") || strings.HasPrefix(rel, "web/") || strings.HasPrefix(rel, "cmd/") {
			return nil
		}
		bp, err := build.ImportDir(path, 0)
		if _, ok := err.(*build.NoGoError); ok {
			return nil
		}
		if err != nil {
			return err
		}
		checked++
		for _, imps := range [][]string{bp.Imports, bp.TestImports, bp.XTestImports} {
			for _, imp := range imps {
				if slices.Contains(top, imp) {
					t.Errorf("%s imports %s: internal packages sit below the command line and the dashboard", rel, strings.TrimPrefix(imp, module))
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 10 {
		t.Fatalf("checked %d internal packages; the walk is broken", checked)
	}
}

package sidekiq_test

import (
	"fmt"
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"go/types"
	"io/fs"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

// maxBackRefs bounds, for every package of the module, the references between
// its files that run back up: a package reads top-down when its files can be
// put in an order where a file refers only to files below it.
const maxBackRefs = 4

// backRefsAllowed lists packages above maxBackRefs with their count today;
// the list only shrinks, and a listed package may not grow.
var backRefsAllowed = map[string]int{}

// TestFilesReferOneWay counts, for every package of the module, the file
// pairs whose references run back up, and fails above maxBackRefs.
//
// The graph: file A refers to file B when A uses a package-level func, type,
// var or const declared in B, or a method declared in B (an interface's
// methods count as declared in the interface's file). Identifiers are
// resolved by go/types with every import replaced by an empty package and
// errors ignored: uses of package-level objects resolve exactly, and so do
// methods reached through package-local types; a method reached through a
// value of an imported type (an embedded imported field) is not seen. Test
// files are left out; build constraints are those of the running platform.
//
// The order: the greedy heuristic of Eades, Lin and Smyth (1993, "A fast and
// effective heuristic for the feedback arc set problem"): files that refer to
// nothing left go to the bottom, files nothing left refers to go to the top,
// else the file with the largest out-minus-in degree goes to the top; then
// single files are moved to the position that removes the most back edges
// while any move helps. The count is an upper bound on the minimum; edges are
// file pairs, whatever the number of references between them.
func TestFilesReferOneWay(t *testing.T) {
	pkgs := moduleDirs(t)
	for _, dir := range pkgs {
		name, edges := fileGraph(t, dir)
		files := graphNodes(edges)
		if name == "" || len(files) < 2 {
			continue
		}
		order := feedbackOrder(files, edges)
		back := backEdges(order, edges)
		rel := filepath.ToSlash(dir)
		limit, listed := backRefsAllowed[rel]
		if !listed {
			limit = maxBackRefs
		}
		if testing.Verbose() {
			t.Logf("%s: %d files, %d edges, %d back", rel, len(files), len(edges)-len(files), len(back))
			if len(back) > 0 {
				t.Logf("\t%s\n\torder: %s", strings.Join(back, "\n\t"), strings.Join(order, " "))
			}
		}
		switch {
		case len(back) > limit:
			t.Errorf("%s: %d references between files run back up (limit %d):\n\t%s\norder: %s",
				rel, len(back), limit, strings.Join(back, "\n\t"), strings.Join(order, " "))
		case listed && len(back) <= maxBackRefs:
			t.Errorf("%s: %d back references, within %d: remove it from backRefsAllowed", rel, len(back), maxBackRefs)
		case listed && len(back) < limit:
			t.Errorf("%s: %d back references, below its allowance %d: lower backRefsAllowed", rel, len(back), limit)
		}
	}
}

// moduleDirs returns the module's package directories relative to its root.
func moduleDirs(t *testing.T) []string {
	t.Helper()
	var dirs []string
	err := filepath.WalkDir("..", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if p != ".." && (strings.HasPrefix(d.Name(), ".") || strings.HasPrefix(d.Name(), "_") || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if matches, _ := filepath.Glob(filepath.Join(p, "*.go")); len(matches) > 0 {
			rel, err := filepath.Rel("..", p)
			if err != nil {
				return err
			}
			dirs = append(dirs, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return dirs
}

type fileEdge struct{ from, to string }

// fileGraph parses the non-test files of the package in dir (relative to the
// module root) and returns its name and the references between its files.
func fileGraph(t *testing.T, dir string) (string, map[fileEdge]bool) {
	t.Helper()
	bp, err := build.ImportDir(filepath.Join("..", dir), 0)
	if err != nil {
		if _, ok := err.(*build.NoGoError); ok {
			return "", nil
		}
		t.Fatalf("%s: %v", dir, err)
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, name := range bp.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(bp.Dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		files = append(files, f)
	}
	conf := types.Config{
		Importer:         emptyImporter{},
		Error:            func(error) {},
		FakeImportC:      true,
		IgnoreFuncBodies: false,
	}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}, Selections: map[*ast.SelectorExpr]*types.Selection{}}
	pkg, _ := conf.Check(bp.ImportPath, fset, files, info)
	fileOf := func(p token.Pos) string { return path.Base(fset.Position(p).Filename) }
	edges := map[fileEdge]bool{}
	for _, f := range files {
		edges[fileEdge{fileOf(f.Pos()), fileOf(f.Pos())}] = true // every file is a node
	}
	add := func(at token.Pos, obj types.Object) {
		if obj == nil || obj.Pkg() != pkg || !obj.Pos().IsValid() {
			return
		}
		if !declaredAtTop(obj, pkg) {
			return
		}
		from, to := fileOf(at), fileOf(obj.Pos())
		if from != to {
			edges[fileEdge{from, to}] = true
		}
	}
	for id, obj := range info.Uses {
		add(id.Pos(), obj)
	}
	for sel, s := range info.Selections {
		if s.Kind() != types.FieldVal {
			add(sel.Sel.Pos(), s.Obj())
		}
	}
	return bp.Name, edges
}

// declaredAtTop reports whether obj is a package-level func, type, var or
// const of pkg, or a method (of a named type or an interface).
func declaredAtTop(obj types.Object, pkg *types.Package) bool {
	switch o := obj.(type) {
	case *types.Func:
		return o.Parent() == pkg.Scope() || o.Signature().Recv() != nil
	case *types.TypeName, *types.Var, *types.Const:
		return obj.Parent() == pkg.Scope()
	}
	return false
}

type emptyImporter struct{}

func (emptyImporter) Import(p string) (*types.Package, error) {
	name := path.Base(p)
	if i := strings.LastIndex(name, "."); i >= 0 {
		name = name[i+1:]
	}
	pkg := types.NewPackage(p, strings.ReplaceAll(name, "-", "_"))
	pkg.MarkComplete()
	return pkg, nil
}

func graphNodes(edges map[fileEdge]bool) []string {
	var nodes []string
	seen := map[string]bool{}
	for e := range edges {
		for _, n := range []string{e.from, e.to} {
			if !seen[n] {
				seen[n] = true
				nodes = append(nodes, n)
			}
		}
	}
	sort.Strings(nodes)
	return nodes
}

// feedbackOrder orders nodes top-down so that few edges run back up: the
// Eades–Lin–Smyth greedy order, then single-node moves while any helps.
func feedbackOrder(nodes []string, edges map[fileEdge]bool) []string {
	out, in := map[string]map[string]bool{}, map[string]map[string]bool{}
	for _, n := range nodes {
		out[n], in[n] = map[string]bool{}, map[string]bool{}
	}
	for e := range edges {
		if e.from != e.to {
			out[e.from][e.to], in[e.to][e.from] = true, true
		}
	}
	left := map[string]bool{}
	for _, n := range nodes {
		left[n] = true
	}
	remove := func(n string) {
		delete(left, n)
		for m := range out[n] {
			delete(in[m], n)
		}
		for m := range in[n] {
			delete(out[m], n)
		}
	}
	var top, bottom []string
	for len(left) > 0 {
		progress := true
		for progress {
			progress = false
			for _, n := range nodes {
				if left[n] && len(out[n]) == 0 {
					bottom = append([]string{n}, bottom...)
					remove(n)
					progress = true
				}
			}
			for _, n := range nodes {
				if left[n] && len(in[n]) == 0 {
					top = append(top, n)
					remove(n)
					progress = true
				}
			}
		}
		best, bestDelta := "", 0
		for _, n := range nodes {
			if d := len(out[n]) - len(in[n]); left[n] && (best == "" || d > bestDelta) {
				best, bestDelta = n, d
			}
		}
		if best != "" {
			top = append(top, best)
			remove(best)
		}
	}
	order := append(top, bottom...)
	for improved := true; improved; {
		improved = false
		cur := len(backEdges(order, edges))
		for i := range order {
			n := order[i]
			rest := slices.Delete(slices.Clone(order), i, i+1)
			for j := 0; j <= len(rest); j++ {
				if j == i {
					continue
				}
				try := slices.Insert(slices.Clone(rest), j, n)
				if c := len(backEdges(try, edges)); c < cur {
					order, cur, improved = try, c, true
					break
				}
			}
		}
	}
	return order
}

// backEdges lists the edges that run from a file to one above it in order.
func backEdges(order []string, edges map[fileEdge]bool) []string {
	pos := map[string]int{}
	for i, n := range order {
		pos[n] = i
	}
	var back []string
	for e := range edges {
		if e.from != e.to && pos[e.to] < pos[e.from] {
			back = append(back, fmt.Sprintf("%s -> %s", e.from, e.to))
		}
	}
	sort.Strings(back)
	return back
}

package arch_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/provider/drivers"
	"github.com/fibe-dev/billing/wallet"
)

const module = "github.com/fibe-dev/billing"

// listed is what `go list -deps -test -json` says of one package.
type listed struct {
	ImportPath   string
	Deps         []string
	Imports      []string
	TestImports  []string
	XTestImports []string
}

// name is the package p is, or is a test build of.
func (p listed) name() string {
	name, _, _ := strings.Cut(p.ImportPath, " ") // "pkg [pkg.test]" for a test build
	return strings.TrimSuffix(strings.TrimSuffix(name, ".test"), "_test")
}

// test reports whether p is a test build (its test binary or a package
// rebuilt for it).
func (p listed) test() bool {
	return strings.Contains(p.ImportPath, " [") || strings.HasSuffix(p.ImportPath, ".test")
}

// dependsOn reports whether p, or its tests, depend on a package at or
// below prefix.
func (p listed) dependsOn(prefix string) (string, bool) {
	for _, deps := range [][]string{p.Deps, p.Imports, p.TestImports, p.XTestImports} {
		for _, d := range deps {
			if d == prefix || strings.HasPrefix(d, prefix+"/") {
				return d, true
			}
		}
	}
	return "", false
}

var (
	listOnce sync.Once
	listAll  []listed
	listErr  error
)

// packages lists every package of the module, its test builds too, with
// their dependencies: one go list for every rule.
func packages(t *testing.T) []listed {
	t.Helper()
	listOnce.Do(func() {
		cmd := exec.Command("go", "list", "-deps", "-test", "-json=ImportPath,Deps,Imports,TestImports,XTestImports", module+"/...")
		var out []byte
		if out, listErr = cmd.Output(); listErr != nil {
			return
		}
		for dec := json.NewDecoder(bytes.NewReader(out)); dec.More(); {
			var p listed
			if listErr = dec.Decode(&p); listErr != nil {
				return
			}
			listAll = append(listAll, p)
		}
	})
	require.NoError(t, listErr)
	require.Greater(t, len(listAll), 40, "go list answered for the module's packages")
	return listAll
}

// find returns the non-test build of the module's package rel.
func find(t *testing.T, rel string) listed {
	t.Helper()
	for _, p := range packages(t) {
		if p.ImportPath == module+"/"+rel {
			return p
		}
	}
	t.Fatalf("go list did not answer for %s", rel)
	return listed{}
}

// TestOnlyCmdImportsConfig: cmd/billing is the one composition root. No
// package below cmd, nor its tests, depends on config; they take their own
// Options, which cmd/billing builds from the configuration (decision 0011).
func TestOnlyCmdImportsConfig(t *testing.T) {
	t.Parallel()
	for _, p := range packages(t) {
		name := p.name()
		if !strings.HasPrefix(name, module) || name == module+"/config" || strings.HasPrefix(name, module+"/cmd/") {
			continue
		}
		_, bad := p.dependsOn(module + "/config")
		require.False(t, bad, "%s depends on config", p.ImportPath)
	}
}

// TestServiceLinksNoLab: the lab (benches, chaos and failover runs) is a
// module of its own that the service never requires, and the service's
// binary links no test kit: no fake provider, no test database, no stripe-mock
// (decision 0014).
func TestServiceLinksNoLab(t *testing.T) {
	t.Parallel()
	for _, p := range packages(t) {
		for _, d := range append(slices.Clone(p.Deps), p.ImportPath) {
			require.False(t, strings.HasPrefix(d, module+"/lab"), "%s depends on the lab package %s", p.ImportPath, d)
		}
	}
	for _, d := range find(t, "cmd/billing").Deps {
		require.False(t, strings.HasPrefix(d, module+"/internal/kit/"), "the billing binary links the test kit's %s", d)
		// Each provider's fake API (internal/provider/<name>/<name>fake)
		// and what they share (providertest) are test support too.
		require.False(t, strings.HasPrefix(d, module+"/internal/provider/") &&
			(strings.HasSuffix(d, "fake") || strings.Contains(d, "/providertest")), "the billing binary links the fake %s", d)
	}
}

// providerSDKs are the provider SDKs, each with the one folder that may
// import it.
var providerSDKs = map[string]string{
	"github.com/stripe/stripe-go":       module + "/internal/provider/stripe",
	"github.com/PaddleHQ/paddle-go-sdk": module + "/internal/provider/paddle",
}

// TestProviderSDKsStayInTheirFolder: a provider is one folder (decision
// 0015). Its SDK is imported only by packages under
// internal/provider/<that provider>/, their tests included: the driver,
// its event builder and its fake API. Anything else asks the registry for
// the provider's facts, or providerevents for its events.
func TestProviderSDKsStayInTheirFolder(t *testing.T) {
	t.Parallel()
	for _, p := range packages(t) {
		name := p.name()
		if !strings.HasPrefix(name, module) {
			continue
		}
		for _, deps := range [][]string{p.Imports, p.TestImports, p.XTestImports} {
			for _, d := range deps {
				for sdk, folder := range providerSDKs {
					if d == sdk || strings.HasPrefix(d, sdk+"/") {
						require.True(t, name == folder || strings.HasPrefix(name, folder+"/"),
							"%s imports %s: only packages under %s may", p.ImportPath, d, folder)
					}
				}
			}
		}
	}
}

// TestConfigImportsNoDomainPackage: config parses into plain values; it
// depends on no package of this module but internal/provider (and what
// that package depends on), which knows no provider: config reads the
// settings the drivers' facts declare into the drivers' Options
// (decision 0015). TestConsumersKnowNoProvider keeps the drivers out.
func TestConfigImportsNoDomainPackage(t *testing.T) {
	t.Parallel()
	shared := find(t, "internal/provider")
	allowed := append(slices.Clone(shared.Deps), shared.ImportPath)
	for _, d := range find(t, "config").Deps {
		require.False(t, strings.HasPrefix(d, module+"/") && !slices.Contains(allowed, d), "config depends on %s", d)
	}
}

// TestProviderSettingsStayInTheirFolder: a provider's configuration keys
// (its webhook secret's, API key's and API URL's, its catalogue id's in
// an SKU) are spelled in its folder only, as its facts' Settings: no
// non-test file elsewhere has a string literal that names one as a word,
// or is its environment variable (BILLING_ and the key in upper case).
// config reads them from the facts; tests may spell them to pin the
// format. Adding a provider adds no key outside its folder.
func TestProviderSettingsStayInTheirFolder(t *testing.T) {
	t.Parallel()
	owner := map[string]string{} // key -> its provider's folder
	for _, f := range drivers.Facts() {
		s := f.Settings
		require.NotEmpty(t, s.WebhookSecret, "%s declares its webhook secret's key", f.Name)
		for _, key := range append(s.Keys(), s.CatalogueID) {
			if key != "" {
				require.NotContains(t, owner, key, "two providers declare %s", key)
				owner[key] = "internal/provider/" + f.Name + "/"
			}
		}
	}
	require.GreaterOrEqual(t, len(owner), 3*3, "every provider's keys were found")
	words := map[string]*regexp.Regexp{}
	for key := range owner {
		words[key] = regexp.MustCompile(`(^|[^A-Za-z0-9_])` + regexp.QuoteMeta(key) + `($|[^A-Za-z0-9_])`)
	}
	spelled := map[string]bool{}
	var found []string
	eachString(t, func(f sourceFile, line int, s string) {
		for key, folder := range owner {
			if !spellsSetting(s, key, words[key]) {
				continue
			}
			if strings.HasPrefix(f.rel, folder) {
				spelled[key] = true
				continue
			}
			found = append(found, fmt.Sprintf("%s:%d: %q spells the setting %s of %s", f.rel, line, s, key, folder))
		}
	})
	require.Empty(t, found, "declare a provider's settings in its facts (provider.Settings) and read them from there")
	for key, folder := range owner {
		require.True(t, spelled[key], "%s is not spelled in %s: the rule looks for it in the wrong place", key, folder)
	}
}

// eachString calls fn with every string literal of the module's non-test
// sources (moduleSources), unquoted, and the line it is on.
func eachString(t *testing.T, fn func(f sourceFile, line int, s string)) {
	t.Helper()
	for _, f := range moduleSources(t) {
		ast.Inspect(f.file, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			require.NoError(t, err, "%s: %s", f.rel, lit.Value)
			fn(f, f.fset.Position(lit.Pos()).Line, s)
			return true
		})
	}
}

// spellsSetting: s names key as a word (word matches it, not inside a
// longer name), or is its environment variable, with or without a
// trailing "=".
func spellsSetting(s, key string, word *regexp.Regexp) bool {
	return strings.TrimSuffix(s, "=") == "BILLING_"+strings.ToUpper(key) || word.MatchString(s)
}

// TestConsumersKnowNoProvider: what Stripe, Paddle and Creem are lives in
// their driver packages only. The packages that verify, open, list and
// refund through drivers (and the money package above all), and the
// timeline and operator page, which ask the registry for the drivers'
// facts, import no driver and no provider SDK (decisions 0010, 0015).
func TestConsumersKnowNoProvider(t *testing.T) {
	t.Parallel()
	forbidden := []string{"github.com/stripe/stripe-go", "github.com/PaddleHQ/paddle-go-sdk",
		module + "/internal/provider/stripe", module + "/internal/provider/paddle", module + "/internal/provider/creem",
		module + "/internal/provider/drivers"}
	for _, rel := range []string{"fulfillment", "internal/payments/webhook", "internal/payments/checkout", "internal/payments/reconcile",
		"internal/web/httpapi", "jobs", "config", "internal/ops/timeline", "internal/web/operatorpage"} {
		p := find(t, rel)
		for _, d := range p.Deps {
			for _, f := range forbidden {
				require.False(t, strings.HasPrefix(d, f), "%s depends on %s", rel, d)
			}
		}
	}
}

// TestProductionPathsKnowNoDevFixtures: the intake, the HTTP API and the
// provider drivers (the production paths a provider's delivery takes) do
// not depend on the development fixtures (providerevents and each
// provider's <name>events builder); only billing dev and tests may.
func TestProductionPathsKnowNoDevFixtures(t *testing.T) {
	t.Parallel()
	for _, rel := range []string{"internal/payments/webhook", "internal/web/httpapi", "internal/provider/drivers"} {
		for _, d := range find(t, rel).Deps {
			require.False(t, d == module+"/internal/provider/providerevents" || strings.HasSuffix(d, "events") &&
				strings.HasPrefix(d, module+"/internal/provider/"), "%s imports the event builder %s", rel, d)
		}
	}
}

// TestNothingImportsTheSimulator: the simulator attacks billing from
// outside; no package's non-test build depends on it.
func TestNothingImportsTheSimulator(t *testing.T) {
	t.Parallel()
	for _, p := range packages(t) {
		if p.test() || strings.HasPrefix(p.ImportPath, module+"/internal/payments/sim") {
			continue
		}
		for _, d := range p.Deps {
			require.False(t, strings.HasPrefix(d, module+"/internal/payments/sim"), "%s depends on %s", p.ImportPath, d)
		}
	}
}

// sourceFile is one parsed non-test Go file of the module.
type sourceFile struct {
	rel  string // slash-separated, from the module root
	file *ast.File
	fset *token.FileSet // file's positions
	// imports maps each name the file uses for an import to its path.
	imports map[string]string
}

// ownModule says whether dir holds a Go module of its own (the lab): its
// files are not the service's, and its own rules hold there.
func ownModule(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "go.mod"))
	return err == nil
}

// moduleSources parses every non-test Go file of the module.
func moduleSources(t *testing.T) []sourceFile {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	require.NoError(t, err)
	var files []sourceFile
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || ownModule(path)) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		files = append(files, sourceFile{rel: filepath.ToSlash(rel), file: f, fset: fset, imports: importNames(f)})
		return nil
	})
	require.NoError(t, err)
	require.Greater(t, len(files), 100, "the module's sources were found")
	return files
}

func importNames(f *ast.File) map[string]string {
	names := map[string]string{}
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		name := path[strings.LastIndex(path, "/")+1:]
		if imp.Name != nil {
			name = imp.Name.Name
		}
		names[name] = path
	}
	return names
}

// calls reports each call of path's function fn in f, with the function
// declaration it sits in (nil at package level).
func (f sourceFile) calls(path, fn string, found func(in *ast.FuncDecl, at token.Pos)) {
	for _, decl := range f.file.Decls {
		in, _ := decl.(*ast.FuncDecl)
		ast.Inspect(decl, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			if sel, ok := call.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == fn {
				if x, ok := sel.X.(*ast.Ident); ok && f.imports[x.Name] == path {
					found(in, call.Pos())
				}
			}
			return true
		})
	}
}

// testHelper: a package that exists for tests (fulfillmenttest, testkit,
// testdb, ...) builds what its tests need.
func (f sourceFile) testHelper() bool {
	dir := filepath.Base(filepath.Dir(f.rel))
	return strings.HasSuffix(dir, "test") || strings.HasPrefix(dir, "test") || f.lab()
}

// lab: the simulator runs billing from outside, as its tests do, and
// builds its own system (TestNothingImportsTheSimulator keeps it out of
// the service).
func (f sourceFile) lab() bool { return strings.HasPrefix(f.rel, "internal/payments/sim/") }

// TestOnlyTheRootBuildsAWalletStore: the program has one wallet store per
// process, built in cmd/billing and handed down; no package below cmd
// builds its own from a pool (test helpers aside).
func TestOnlyTheRootBuildsAWalletStore(t *testing.T) {
	t.Parallel()
	var builders []string
	for _, f := range moduleSources(t) {
		if f.testHelper() {
			continue
		}
		f.calls(module+"/wallet", "New", func(_ *ast.FuncDecl, _ token.Pos) {
			builders = append(builders, f.rel)
		})
	}
	require.Equal(t, []string{"cmd/billing/wire.go"}, builders, "wallet.New is called only by the composition root")
}

// TestWorkersRegisterOneWay: every package adds its River workers in a
// Register function of one shape, func(*river.Workers[, options])
// []*river.PeriodicJob, and the composition root's registry
// (cmd/billing/workers.go) calls every one of them in its one list.
func TestWorkersRegisterOneWay(t *testing.T) {
	t.Parallel()
	files := moduleSources(t)
	registers := map[string]bool{} // "pkgpath.Func" of each Register of the shape
	for _, f := range files {
		f.calls("github.com/riverqueue/river", "AddWorker", func(in *ast.FuncDecl, at token.Pos) {
			require.NotNil(t, in, "%s: river.AddWorker outside a function", f.rel)
			require.True(t, registerShape(f, in), "%s: river.AddWorker in %s, which is not a Register function "+
				"func(*river.Workers[, options]) []*river.PeriodicJob", f.rel, in.Name.Name)
			if in.Recv == nil && ast.IsExported(in.Name.Name) {
				registers[module+"/"+filepath.ToSlash(filepath.Dir(f.rel))+"."+in.Name.Name] = true
			}
		})
	}
	require.GreaterOrEqual(t, len(registers), 6, "the domain packages' and the no-op job's Register")
	called := registryCalls(t, files)
	for r := range registers {
		require.True(t, called[r], "cmd/billing's registry does not call %s", r)
	}
}

// registerShape: fn is named Register..., takes *river.Workers first and,
// at most, one options value, and returns []*river.PeriodicJob.
func registerShape(f sourceFile, fn *ast.FuncDecl) bool {
	params, results := fn.Type.Params.List, fn.Type.Results
	if !strings.HasPrefix(fn.Name.Name, "Register") || len(params) == 0 || len(params) > 2 ||
		len(params[0].Names) > 1 || results == nil || len(results.List) != 1 {
		return false
	}
	return typeIs(f, params[0].Type, "*", "github.com/riverqueue/river", "Workers") &&
		typeIs(f, results.List[0].Type, "[]*", "github.com/riverqueue/river", "PeriodicJob")
}

// typeIs: expr is prefix (a run of "*" and "[]") then path's name.
func typeIs(f sourceFile, expr ast.Expr, prefix, path, name string) bool {
	for prefix != "" {
		switch e := expr.(type) {
		case *ast.StarExpr:
			if !strings.HasPrefix(prefix, "*") {
				return false
			}
			expr, prefix = e.X, prefix[1:]
		case *ast.ArrayType:
			if !strings.HasPrefix(prefix, "[]") || e.Len != nil {
				return false
			}
			expr, prefix = e.Elt, prefix[2:]
		default:
			return false
		}
	}
	sel, ok := expr.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	x, ok := sel.X.(*ast.Ident)
	return ok && f.imports[x.Name] == path && sel.Sel.Name == name
}

// registryCalls are the functions the composition root's registry
// (func registry in cmd/billing/workers.go) calls, as "pkgpath.Func".
func registryCalls(t *testing.T, files []sourceFile) map[string]bool {
	t.Helper()
	called := map[string]bool{}
	for _, f := range files {
		if f.rel != "cmd/billing/workers.go" {
			continue
		}
		for _, decl := range f.file.Decls {
			if fn, ok := decl.(*ast.FuncDecl); ok && fn.Name.Name == "registry" && fn.Recv == nil {
				ast.Inspect(fn.Body, func(n ast.Node) bool {
					if c, ok := n.(*ast.SelectorExpr); ok {
						if x, ok := c.X.(*ast.Ident); ok && f.imports[x.Name] != "" {
							called[f.imports[x.Name]+"."+c.Sel.Name] = true
						}
					}
					return true
				})
			}
		}
	}
	require.NotEmpty(t, called, "cmd/billing/workers.go's registry was found")
	return called
}

// TestOnlyTheRootRegistersWorkers: no package below cmd builds a worker
// bundle of other packages' workers (a second composition root): each
// package's Register adds its own, and only cmd/billing calls the
// Register functions of several (test helpers aside).
func TestOnlyTheRootRegistersWorkers(t *testing.T) {
	t.Parallel()
	files := moduleSources(t)
	registers := map[string]bool{}
	for _, f := range files {
		f.calls("github.com/riverqueue/river", "AddWorker", func(in *ast.FuncDecl, _ token.Pos) {
			if in != nil && in.Recv == nil {
				registers[module+"/"+filepath.ToSlash(filepath.Dir(f.rel))+"."+in.Name.Name] = true
			}
		})
	}
	for _, f := range files {
		if f.testHelper() || strings.HasPrefix(f.rel, "cmd/") {
			continue
		}
		for _, path := range f.imports {
			for r := range registers {
				if fn, ok := strings.CutPrefix(r, path+"."); ok {
					f.calls(path, fn, func(_ *ast.FuncDecl, _ token.Pos) {
						t.Errorf("%s calls %s.%s: only cmd/billing registers other packages' workers", f.rel, path, fn)
					})
				}
			}
		}
	}
}

// TestWebLinksNoWorkerRuntime: the HTTP API inserts jobs through River's
// own client type; building it links neither the worker runtime (package
// jobs, whose Deps name every worker's needs) nor a package that is only
// workers (reconciliation), nor the composition root.
func TestWebLinksNoWorkerRuntime(t *testing.T) {
	t.Parallel()
	for _, d := range find(t, "internal/web/httpapi").Deps {
		for _, bad := range []string{module + "/jobs", module + "/internal/payments/reconcile", module + "/cmd/"} {
			require.False(t, d == bad || strings.HasPrefix(d, bad), "internal/web/httpapi depends on %s", d)
		}
	}
}

// maxFuncLines bounds a function's body in the service: a longer one does
// several things, and reads better as the functions it is made of.
const maxFuncLines = 60

// TestNoFunctionOver60Lines: no function or method of the service (its
// non-test files; the lab is a module of its own) has a body of more than
// maxFuncLines lines, braces aside.
func TestNoFunctionOver60Lines(t *testing.T) {
	t.Parallel()
	for _, f := range moduleSources(t) {
		for _, decl := range f.file.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			lines := f.fset.Position(fn.Body.Rbrace).Line - f.fset.Position(fn.Body.Lbrace).Line - 1
			if lines > maxFuncLines {
				t.Errorf("%s:%d: %s's body is %d lines, over %d: split it", f.rel, f.fset.Position(fn.Pos()).Line,
					fn.Name.Name, lines, maxFuncLines)
			}
		}
	}
}

// TestOnlyDevReachesTheDevCheckout: the simulated checkout (package
// devcheckout) is imported by billing dev's files (cmd/billing/dev*.go) only, and only dev's run
// adds it to the API's options; billing web cannot reach it
// (TestWebServesNoDevCheckout shows it from outside).
func TestOnlyDevReachesTheDevCheckout(t *testing.T) {
	t.Parallel()
	var importers, adders []string
	for _, f := range moduleSources(t) {
		if slices.Contains(slices.Collect(maps.Values(f.imports)), module+"/internal/dev/devcheckout") {
			importers = append(importers, f.rel)
		}
		ast.Inspect(f.file, func(n ast.Node) bool {
			if c, ok := n.(*ast.CallExpr); ok {
				if id, ok := c.Fun.(*ast.Ident); ok && id.Name == "withDevCheckout" && strings.HasPrefix(f.rel, "cmd/billing/") {
					adders = append(adders, f.rel)
				}
			}
			return true
		})
	}
	require.Contains(t, importers, "cmd/billing/dev_checkout.go")
	for _, rel := range importers {
		require.True(t, strings.HasPrefix(rel, "cmd/billing/dev"), "%s imports devcheckout: only billing dev's files may", rel)
	}
	require.Equal(t, []string{"cmd/billing/dev.go"}, adders)
}

// TestSimulatorModelKnowsNoBilling: the simulator's model and the
// histories it reads import no package of billing, so the model cannot
// share a rule with the code it judges (docs/simulator.md).
func TestSimulatorModelKnowsNoBilling(t *testing.T) {
	t.Parallel()
	for _, file := range []string{"model.go", "history.go"} {
		path := filepath.Join("..", "..", "payments", "sim", file)
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		require.NoError(t, err)
		for _, imp := range f.Imports {
			p, err := strconv.Unquote(imp.Path.Value)
			require.NoError(t, err)
			require.False(t, strings.HasPrefix(p, module), "internal/payments/sim/%s imports %s", file, p)
		}
	}
}

// references are the files that spell a key namespace for what is not a
// key: the namespaces order: and marquee: also start references
// (order:<id>, marquee:<id>:<day>) and a legacy payment id (order:<id>).
// A key in either namespace always ends in a spelling the rule catches
// (:fulfilment, :funding), so only the namespace is allowed, and only in
// these files.
var references = map[string][]string{
	"fulfillment/worker.go":               {"order:"},   // the fulfilment's Reference
	"fulfillment/payments.go":             {"order:"},   // a legacy payment's id
	"enforcer/fundbatch.go":               {"marquee:"}, // a funding debit's Reference
	"enforcer/audit.go":                   {"marquee:"}, // the audit reads that Reference
	"internal/web/httpapi/v1_marquees.go": {"marquee:"}, // what a fund request names
}

// spellingRule matches spelling where a string literal would spell it as
// part of a key: a namespace (order:) at the start of a word and not
// followed by white space (an error's "api: ..." is no key), or a suffix
// (:settle) at the end of a word.
func spellingRule(spelling string) *regexp.Regexp {
	if strings.HasPrefix(spelling, ":") {
		return regexp.MustCompile(regexp.QuoteMeta(spelling) + `($|[^A-Za-z0-9_])`)
	}
	return regexp.MustCompile(`(^|[^A-Za-z0-9_])` + regexp.QuoteMeta(spelling) + `($|\S)`)
}

// TestKeysAreSpelledByTheWallet: the wallet's key grammar has one home.
// No non-test file outside wallet/ spells, in a string literal, a fixed
// part of a key the system derives (wallet.KeySpellings: order:,
// :fulfilment, :back, ...): Go builds keys with the wallet's constructors,
// SQL with its fragments (wallet.SQLFulfilmentKey, ...), which a test of
// the wallet ties to the Go forms (decision 0017).
func TestKeysAreSpelledByTheWallet(t *testing.T) {
	t.Parallel()
	spellings := wallet.KeySpellings()
	require.Contains(t, spellings, ":back:write_off", "the list comes from the wallet's grammar")
	var found []string
	allowed := map[string]bool{}
	eachString(t, func(f sourceFile, _ int, s string) {
		if strings.HasPrefix(f.rel, "wallet/") {
			return
		}
		for _, sp := range spellings {
			switch {
			case !spellingRule(sp).MatchString(s):
			case slices.Contains(references[f.rel], sp):
				allowed[f.rel+" "+sp] = true
			default:
				found = append(found, fmt.Sprintf("%s: %q spells the wallet key spelling %q", f.rel, s, sp))
			}
		}
	})
	require.Empty(t, found, "build keys with the wallet's constructors, or its SQL fragments (wallet/keys_sql.go)")
	for rel, sps := range references {
		for _, sp := range sps {
			require.True(t, allowed[rel+" "+sp], "%s no longer spells the reference %q: drop it from references", rel, sp)
		}
	}
}

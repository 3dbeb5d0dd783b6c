package dlock_test

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// docFiles are the Markdown files whose code blocks the tests check.
func docFiles(t *testing.T) []string {
	docs, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{"README.md"}, docs...)
}

// TestREADMECompiles type-checks every Go code block of the README and of
// docs/. A block is a fragment of a function that returns an error: it is
// wrapped in one, after a prelude that imports the packages the docs use
// and declares what the fragments take for granted (ctx, client, db, lock,
// and the application's buildReport and run); the names a fragment declares
// are used once so that showing a result without using it is not an error.
func TestREADMECompiles(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go vet")
	}
	var blocks []block
	for _, name := range docFiles(t) {
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		blocks = append(blocks, fencedBlocks(name, src, "go")...)
	}
	if len(blocks) == 0 {
		t.Fatal("the docs have no Go code block")
	}
	dir, err := os.MkdirTemp(".", "_readme") // inside the module, ignored by ./...
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	for i, b := range blocks {
		code, err := wrapBlock(b.code)
		if err != nil {
			t.Errorf("%s:%d: the block does not parse: %v\n%s", b.file, b.line, err, b.code)
			continue
		}
		sub := filepath.Join(dir, fmt.Sprintf("b%02d", i))
		if err := os.Mkdir(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(sub, "block.go"), code, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{"vet"}
	for i := range blocks {
		args = append(args, "./"+filepath.ToSlash(filepath.Join(dir, fmt.Sprintf("b%02d", i))))
	}
	out, err := exec.Command("go", args...).CombinedOutput()
	if err != nil {
		t.Errorf("code blocks of the docs do not compile (go vet: %v):\n%s", err, mapLines(out, dir, blocks))
	}
	t.Logf("%d Go code blocks of the docs compile", len(blocks))
}

// TestDocsShellExamples runs every shell example of the README and of
// docs/ that shows its output: a ```sh block followed, with nothing but
// blank lines between, by a ```text block. The block runs in sh on a new
// default store (a SQLite file in a temporary $XDG_STATE_HOME), with the
// dlock CLI built from this tree first on $PATH, and what it prints on
// standard output must be the text block.
func TestDocsShellExamples(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the CLI")
	}
	var examples []block
	for _, name := range docFiles(t) {
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		examples = append(examples, shellExamples(name, src)...)
	}
	if len(examples) == 0 {
		t.Fatal("the docs have no shell example with its output")
	}
	bin := t.TempDir()
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/dlock").CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/dlock: %v\n%s", err, out)
	}
	for _, ex := range examples {
		t.Run(fmt.Sprintf("%s:%d", ex.file, ex.line), func(t *testing.T) {
			cmd := exec.Command("sh", "-c", ex.code)
			cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"),
				"XDG_STATE_HOME="+t.TempDir(), "DLOCK_URL=")
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Errorf("%s:%d: %v\n%s", ex.file, ex.line, err, stderr.Bytes())
			}
			if string(out) != ex.output {
				t.Errorf("%s:%d: the example prints\n%s\nthe docs say\n%s", ex.file, ex.line, out, ex.output)
			}
		})
	}
}

type block struct {
	file   string
	line   int // of the first line of code in file
	code   string
	lang   string
	output string // of a shell example: the text block that follows it
}

// fencedBlocks returns the fenced code blocks of a Markdown text, of the
// language lang, or of every language if lang is "".
func fencedBlocks(file string, md []byte, lang string) []block {
	var (
		bs   []block
		cur  *block
		body strings.Builder
	)
	sc := bufio.NewScanner(bytes.NewReader(md))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case cur == nil && strings.HasPrefix(line, "```"):
			cur = &block{file: file, line: n + 1, lang: strings.TrimPrefix(line, "```")}
			body.Reset()
		case cur != nil && line == "```":
			cur.code = body.String()
			if lang == "" || cur.lang == lang {
				bs = append(bs, *cur)
			}
			cur = nil
		case cur != nil:
			body.WriteString(sc.Text() + "\n")
		}
	}
	return bs
}

// shellExamples returns the ```sh blocks of a Markdown text that a ```text
// block follows, with nothing but blank lines between, with that output.
func shellExamples(file string, md []byte) []block {
	lines := strings.Split(string(md), "\n")
	var exs []block
	bs := fencedBlocks(file, md, "")
	for i := 0; i+1 < len(bs); i++ {
		a, b := bs[i], bs[i+1]
		if a.lang != "sh" || b.lang != "text" {
			continue
		}
		// a's closing fence is line a.line+len(a's lines) (from 1), b's
		// opening one line b.line-1: what lies between is at these indexes.
		between := lines[a.line+strings.Count(a.code, "\n") : b.line-2]
		if strings.TrimSpace(strings.Join(between, "")) != "" {
			continue
		}
		a.output = b.code
		exs = append(exs, a)
	}
	return exs
}

// prelude is what every block is compiled with. Its imports are used once
// so that a block need not use them all.
const prelude = `package readme

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/fence"
	"github.com/dlockhq/dlock/fill"
	"github.com/dlockhq/dlock/job"
	"github.com/dlockhq/dlock/leader"
	"github.com/dlockhq/dlock/ratelimit"
	"github.com/dlockhq/dlock/sqldlock"
	_ "github.com/dlockhq/dlock/sqldlock/postgres" // sqldlock.New(db, sqldlock.Postgres) needs it
%s)

var (
	_ = context.Background
	_ = sql.Open
	_ = errors.Is
	_ = fmt.Println
	_ = time.Second
	_ = dlock.Open
	_ = job.Run
	_ = leader.Campaign
	_ = sqldlock.New
	_ = fence.NewSQL
	_ = fill.Once[int]
	_ = ratelimit.New
)

// What the fragments take for granted.
var (
	ctx    context.Context
	client *dlock.Client
	db     *sql.DB
	lock   *dlock.Lock
)

func buildReport(context.Context, ...any) error            { return nil }
func run(context.Context, ...any)                          {}
func loadReport(context.Context) (string, bool, error)     { return "", false, nil }
func computeReport(context.Context) (string, error)        { return "", nil }
func storeReport(context.Context, string) error            { return nil }

func _() error {
%s
	return nil
}
`

// wrapBlock returns the Go file for a README fragment: its own imports go to
// the file's, its statements into a function, followed by a use of every
// name it declares at the top level.
func wrapBlock(code string) ([]byte, error) {
	var imports, body strings.Builder
	lines := strings.Split(code, "\n")
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		switch {
		case l == "import (":
			for i++; i < len(lines) && strings.TrimSpace(lines[i]) != ")"; i++ {
				imports.WriteString(lines[i] + "\n")
			}
		case strings.HasPrefix(l, "import "):
			imports.WriteString("\t" + strings.TrimPrefix(l, "import ") + "\n")
		default:
			body.WriteString(lines[i] + "\n")
		}
	}
	src := fmt.Sprintf(prelude, dedupImports(imports.String()), body.String())
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "block.go", src, 0)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Name.Name != "_" {
			continue
		}
		for _, st := range fn.Body.List {
			if as, ok := st.(*ast.AssignStmt); ok && as.Tok == token.DEFINE {
				for _, e := range as.Lhs {
					if id, ok := e.(*ast.Ident); ok && id.Name != "_" && !slices.Contains(names, id.Name) {
						names = append(names, id.Name)
					}
				}
			}
		}
	}
	var uses strings.Builder
	for _, n := range names {
		uses.WriteString("\t_ = " + n + "\n")
	}
	return []byte(fmt.Sprintf(prelude, dedupImports(imports.String()), body.String()+uses.String())), nil
}

// dedupImports drops the imports the prelude has already.
func dedupImports(imports string) string {
	var b strings.Builder
	for _, l := range strings.Split(imports, "\n") {
		t := strings.TrimSpace(l)
		if t == "" || strings.Contains(prelude, "\t"+t+"\n") {
			continue
		}
		b.WriteString("\t" + t + "\n")
	}
	return b.String()
}

// mapLines prefixes go vet's output with the file and line of each block.
func mapLines(out []byte, dir string, blocks []block) string {
	s := string(out)
	for i, b := range blocks {
		s = strings.ReplaceAll(s, filepath.Join(dir, fmt.Sprintf("b%02d", i))+"/", fmt.Sprintf("[%s block at line %d] ", b.file, b.line))
	}
	return s
}

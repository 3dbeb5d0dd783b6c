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

// TestREADMECompiles type-checks every Go code block of the README. A block
// is a fragment of a function that returns an error: it is wrapped in one,
// after a prelude that imports the packages the README uses and declares
// what the fragments take for granted (ctx, client, db, lock, and the
// application's buildReport and run); the names a fragment declares are
// used once so that showing a result without using it is not an error.
func TestREADMECompiles(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go vet")
	}
	src, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := goBlocks(src)
	if len(blocks) == 0 {
		t.Fatal("the README has no Go code block")
	}
	dir, err := os.MkdirTemp(".", "_readme") // inside the module, ignored by ./...
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	for i, b := range blocks {
		code, err := wrapBlock(b.code)
		if err != nil {
			t.Errorf("README.md:%d: the block does not parse: %v\n%s", b.line, err, b.code)
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
		t.Errorf("README code blocks do not compile (go vet: %v):\n%s", err, mapLines(out, dir, blocks))
	}
	t.Logf("%d Go code blocks of the README compile", len(blocks))
}

type block struct {
	line int // of the first line of code in README.md
	code string
}

// goBlocks returns the ```go blocks of a Markdown text.
func goBlocks(md []byte) []block {
	var (
		bs   []block
		cur  *block
		body strings.Builder
	)
	sc := bufio.NewScanner(bytes.NewReader(md))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur == nil && strings.TrimSpace(line) == "```go":
			cur = &block{line: n + 1}
			body.Reset()
		case cur != nil && strings.TrimSpace(line) == "```":
			cur.code = body.String()
			bs = append(bs, *cur)
			cur = nil
		case cur != nil:
			body.WriteString(line + "\n")
		}
	}
	return bs
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

// mapLines prefixes go vet's output with the README lines of the blocks.
func mapLines(out []byte, dir string, blocks []block) string {
	s := string(out)
	for i, b := range blocks {
		s = strings.ReplaceAll(s, filepath.Join(dir, fmt.Sprintf("b%02d", i))+"/", fmt.Sprintf("[README block at line %d] ", b.line))
	}
	return s
}

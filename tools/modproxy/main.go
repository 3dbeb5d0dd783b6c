// Command modproxy writes a Go module proxy on disk (the GOPROXY protocol's
// files, served with GOPROXY=file://DIR) holding every published module of
// a git repository at one revision and version: the root module at VERSION
// and each nested module at its own path and the same version, as the tags
// v0.1.0 and observe/dlockprom/v0.1.0 name them.
//
// It is what the release check uses to act as a stranger would, with the
// repository's modules fetched from a proxy instead of a work tree:
//
//	modproxy -repo . -rev HEAD -version v0.1.0 -out /tmp/proxy
//
// Module zips are made by golang.org/x/mod/zip from the files git tracks at
// the revision (git archive), so they are what a public proxy would serve
// for a tag of that revision.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	modzip "golang.org/x/mod/zip"
)

func main() {
	repo := flag.String("repo", ".", "the git repository")
	rev := flag.String("rev", "HEAD", "the revision to publish")
	version := flag.String("version", "", "the version to publish every module at (required, e.g. v0.1.0)")
	out := flag.String("out", "", "the proxy directory to write (required)")
	skip := flag.String("skip", "bench,tools", "comma-separated module directories that are not published")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("modproxy: ")
	if *version == "" || *out == "" {
		flag.Usage()
		os.Exit(2)
	}
	if err := module.Check("example.com/m", *version); err != nil {
		log.Fatalf("version %q: %v", *version, err)
	}
	dirs, err := moduleDirs(*repo, *rev)
	if err != nil {
		log.Fatal(err)
	}
	tree, err := os.MkdirTemp("", "modproxy")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(tree)
	if err := extract(*repo, *rev, tree); err != nil {
		log.Fatal(err)
	}
	skipped := map[string]bool{}
	for _, d := range strings.Split(*skip, ",") {
		skipped[d] = true
	}
	when, err := git(*repo, "log", "-1", "--format=%cI", *rev)
	if err != nil {
		log.Fatal(err)
	}
	t, err := time.Parse(time.RFC3339, strings.TrimSpace(string(when)))
	if err != nil {
		log.Fatal(err)
	}
	for _, dir := range dirs {
		if skipped[dir] {
			continue
		}
		if err := publish(tree, dir, *version, t.UTC(), *out); err != nil {
			os.RemoveAll(tree)
			log.Fatalf("%s: %v", dir, err)
		}
	}
}

// moduleDirs lists the directories of the repository, at rev, that hold a
// go.mod file ("." for the root).
func moduleDirs(repo, rev string) ([]string, error) {
	names, err := git(repo, "ls-tree", "-r", "--name-only", rev)
	if err != nil {
		return nil, err
	}
	var dirs []string
	for _, name := range strings.Split(strings.TrimSpace(string(names)), "\n") {
		if path.Base(name) == "go.mod" {
			dirs = append(dirs, path.Dir(name))
		}
	}
	return dirs, nil
}

// extract writes the files git tracks at rev into dir.
func extract(repo, rev, dir string) error {
	archive := exec.Command("git", "-C", repo, "archive", rev)
	untar := exec.Command("tar", "-x", "-C", dir)
	var err error
	if untar.Stdin, err = archive.StdoutPipe(); err != nil {
		return err
	}
	archive.Stderr, untar.Stderr = os.Stderr, os.Stderr
	if err := untar.Start(); err != nil {
		return err
	}
	if err := archive.Run(); err != nil {
		return fmt.Errorf("git archive %s: %w", rev, err)
	}
	return untar.Wait()
}

// publish writes the .mod, .info and .zip files of the module in the
// directory dir of tree.
func publish(tree, dir, version string, t time.Time, out string) error {
	gomod, err := os.ReadFile(filepath.Join(tree, dir, "go.mod"))
	if err != nil {
		return err
	}
	f, err := modfile.ParseLax("go.mod", gomod, nil)
	if err != nil {
		return err
	}
	mv := module.Version{Path: f.Module.Mod.Path, Version: version}
	escaped, err := module.EscapePath(mv.Path)
	if err != nil {
		return err
	}
	vdir := filepath.Join(out, escaped, "@v")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		return err
	}
	var zip bytes.Buffer
	if err := modzip.CreateFromDir(&zip, mv, filepath.Join(tree, dir)); err != nil {
		return err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, t})
	if err != nil {
		return err
	}
	for name, data := range map[string][]byte{
		version + ".mod":  gomod,
		version + ".info": info,
		version + ".zip":  zip.Bytes(),
	} {
		if err := os.WriteFile(filepath.Join(vdir, name), data, 0o644); err != nil {
			return err
		}
	}
	list, err := os.OpenFile(filepath.Join(vdir, "list"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer list.Close()
	_, err = fmt.Fprintln(list, version)
	fmt.Printf("%s@%s\n", mv.Path, version)
	return err
}

func git(repo string, args ...string) ([]byte, error) {
	cmd := exec.Command("git", append([]string{"-C", repo}, args...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
	}
	return out, nil
}

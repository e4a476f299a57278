package readme

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// goBlocks returns the ```go blocks of a Markdown text, with the line
// each starts on.
func goBlocks(md string) (blocks []string, lines []int) {
	var b strings.Builder
	in, start := false, 0
	for i, l := range strings.Split(md, "\n") {
		switch {
		case !in && strings.TrimSpace(l) == "```go":
			in, start = true, i+2
			b.Reset()
		case in && strings.TrimSpace(l) == "```":
			in = false
			blocks, lines = append(blocks, b.String()), append(lines, start)
		case in:
			b.WriteString(l + "\n")
		}
	}
	return blocks, lines
}

func TestGoBlocks(t *testing.T) {
	blocks, lines := goBlocks("a\n```go\npackage main\n```\n```\nnot go\n```\n```go\nfunc f() {}\n```\n")
	if len(blocks) != 2 || blocks[0] != "package main\n" || blocks[1] != "func f() {}\n" || lines[0] != 3 || lines[1] != 9 {
		t.Fatalf("blocks %q at lines %v", blocks, lines)
	}
}

// TestReadmeCompiles builds and vets every Go block of README.md as a
// program of its own, in a module of a user's that requires this one,
// replaced by this tree: what `go get` gives a user, with no network (the
// requirements are this module's own, whose go.sum the user's takes).
func TestReadmeCompiles(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks, lines := goBlocks(string(md))
	if len(blocks) == 0 {
		t.Fatal("README.md has no ```go block")
	}
	user := t.TempDir()
	gomod := exec.Command("go", "mod", "edit", "-json")
	gomod.Dir = root
	js, err := gomod.Output()
	if err != nil {
		t.Fatalf("go mod edit -json: %v", err)
	}
	var mod struct {
		Module  struct{ Path string }
		Go      string
		Require []struct{ Path, Version string }
	}
	if err := json.Unmarshal(js, &mod); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "module example.com/readme\n\ngo %s\n\nrequire %s v0.0.0\n\nreplace %s => %s\n",
		mod.Go, mod.Module.Path, mod.Module.Path, root)
	for _, r := range mod.Require {
		fmt.Fprintf(&b, "require %s %s\n", r.Path, r.Version)
	}
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"go.mod": []byte(b.String()), "go.sum": sum} {
		if err := os.WriteFile(filepath.Join(user, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i, b := range blocks {
		if !strings.HasPrefix(b, "package main\n") {
			t.Errorf("README.md:%d: a Go block is a whole program, starting with package main", lines[i])
			continue
		}
		dir := filepath.Join(user, fmt.Sprintf("line%d", lines[i]))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(b), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if t.Failed() {
		return
	}
	for _, args := range [][]string{{"build", "-o", os.DevNull, "./..."}, {"vet", "./..."}} {
		cmd := exec.Command("go", args...)
		cmd.Dir = user
		// Offline, and this module's requirements as they stand.
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOPROXY=off", "GOFLAGS=-mod=readonly", "GOWORK=off")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("go %s: %v\n%s", args[0], err, out)
		}
	}
}

// SPDX-License-Identifier: Apache-2.0

package testlab

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// bootModules are what the guest needs before it can reach its root
// filesystem: the 9p filesystem over virtio. (virtio-pci itself is built
// into Debian kernels; if a kernel has any of these built in, they are
// skipped.) Their dependencies (netfs in 6.12) come from modules.dep.
var bootModules = []string{"9pnet_virtio", "9p"}

// moduleName normalises a path or name to the kernel's module name:
// "kernel/net/9p/9pnet_virtio.ko.xz" -> "9pnet_virtio"; '-' and '_' are
// the same to the kernel.
func moduleName(p string) string {
	b := filepath.Base(p)
	if i := strings.Index(b, ".ko"); i >= 0 {
		b = b[:i]
	}
	return strings.ReplaceAll(b, "-", "_")
}

// moduleDeps is modules.dep: module name -> its file (relative to
// /lib/modules/<release>) and the files it depends on.
type moduleDeps map[string]moduleEntry

type moduleEntry struct {
	path string
	deps []string
}

func parseModulesDep(r io.Reader) (moduleDeps, error) {
	deps := moduleDeps{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		path, rest, ok := strings.Cut(line, ":")
		if !ok {
			return nil, fmt.Errorf("modules.dep: malformed line %q", line)
		}
		deps[moduleName(path)] = moduleEntry{path: path, deps: strings.Fields(rest)}
	}
	return deps, sc.Err()
}

// parseBuiltin reads modules.builtin (one path per line) into a set of names.
func parseBuiltin(r io.Reader) (map[string]bool, error) {
	set := map[string]bool{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			set[moduleName(l)] = true
		}
	}
	return set, sc.Err()
}

// loadOrder returns the module files to insmod, dependencies first, each
// once, for the wanted modules. A wanted module that is built in is
// skipped; one that is neither built in nor in modules.dep is an error.
// The order does not rely on how modules.dep orders a line: each dependency
// is visited through its own line first (depth-first, post-order).
func loadOrder(deps moduleDeps, builtin map[string]bool, want []string) ([]string, error) {
	var order []string
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(name string, chain []string) error
	visit = func(name string, chain []string) error {
		switch state[name] {
		case 2:
			return nil
		case 1:
			return fmt.Errorf("module dependency cycle: %s -> %s", strings.Join(chain, " -> "), name)
		}
		e, ok := deps[name]
		if !ok {
			if builtin[name] {
				state[name] = 2
				return nil
			}
			return fmt.Errorf("module %s is neither in modules.dep nor built in", name)
		}
		state[name] = 1
		for _, d := range e.deps {
			if err := visit(moduleName(d), append(chain, name)); err != nil {
				return err
			}
		}
		state[name] = 2
		order = append(order, e.path)
		return nil
	}
	for _, w := range want {
		if err := visit(moduleName(w), nil); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// bootModuleFiles resolves bootModules for a release into absolute paths,
// in load order.
func bootModuleFiles(root, release string) ([]string, error) {
	return moduleFiles(root, release, bootModules)
}

// moduleFiles resolves the modules named in want, and their dependencies,
// for a release under root into absolute host paths, in load order.
func moduleFiles(root, release string, want []string) ([]string, error) {
	dir := inRoot(root, filepath.Join("/lib/modules", release))
	f, err := os.Open(filepath.Join(dir, "modules.dep"))
	if err != nil {
		return nil, fmt.Errorf("modules for kernel %s: %w (run make setup)", release, err)
	}
	defer f.Close()
	deps, err := parseModulesDep(f)
	if err != nil {
		return nil, err
	}
	builtin := map[string]bool{}
	if b, err := os.Open(filepath.Join(dir, "modules.builtin")); err == nil {
		builtin, err = parseBuiltin(b)
		b.Close()
		if err != nil {
			return nil, err
		}
	}
	rel, err := loadOrder(deps, builtin, want)
	if err != nil {
		return nil, fmt.Errorf("kernel %s: %w", release, err)
	}
	abs := make([]string, len(rel))
	for i, p := range rel {
		abs[i] = filepath.Join(dir, p)
	}
	return abs, nil
}

// readModule returns a module's plain ELF bytes. Debian ships .ko.xz, and
// busybox insmod passes the bytes to init_module unmodified, so they are
// decompressed here. Go's standard library has no xz or zstd, so those go
// through the xz/zstd tools (xz-utils is installed by make setup).
func readModule(path string) ([]byte, error) {
	var tool string
	switch {
	case strings.HasSuffix(path, ".ko"):
		return os.ReadFile(path)
	case strings.HasSuffix(path, ".ko.gz"):
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		zr, err := gzip.NewReader(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return io.ReadAll(zr)
	case strings.HasSuffix(path, ".ko.xz"):
		tool = "xz"
	case strings.HasSuffix(path, ".ko.zst"):
		tool = "zstd"
	default:
		return nil, fmt.Errorf("%s: unknown module compression", path)
	}
	var out, errb bytes.Buffer
	cmd := exec.Command(tool, "-dc", path)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("decompressing %s with %s: %v: %s", path, tool, err, strings.TrimSpace(errb.String()))
	}
	return out.Bytes(), nil
}

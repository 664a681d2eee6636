// Package impl is the registry of checksum kernel implementations.
//
// Each kernel package registers every implementation it was built with,
// best first, together with whether the running CPU can execute it and a
// function that makes it the active one. The default is the first available
// implementation. Tests and benchmarks use List and Select to run every
// implementation the machine can run; `difctl kernels` uses Active to say
// which one is in use.
//
// The environment variable DIFCTL_KERNELS forces a choice at start-up, as a
// comma-separated list of pkg=name pairs (for example
// "crct10dif=generic,crc32c=generic"). An unknown or unavailable name there
// is ignored and the default stays in force; Forced reports what was asked.
package impl

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
)

// Impl describes one registered implementation.
type Impl struct {
	Package   string // kernel package, e.g. "crct10dif"
	Name      string // implementation name, e.g. "avx512"
	Available bool   // the running CPU supports it
	Active    bool   // it is the one in use
}

type entry struct {
	name      string
	available bool
	activate  func()
}

type pkgEntries struct {
	entries []entry
	active  int
}

var (
	mu   sync.Mutex
	pkgs = map[string]*pkgEntries{}
)

// Register adds an implementation of pkg. Implementations are registered
// best first, from package init functions. The first available one becomes
// active (its activate function is called) unless DIFCTL_KERNELS names
// another available one. Register panics on a duplicate name: that is a
// programming error found by every test run.
func Register(pkg, name string, available bool, activate func()) {
	mu.Lock()
	defer mu.Unlock()
	p := pkgs[pkg]
	if p == nil {
		p = &pkgEntries{active: -1}
		pkgs[pkg] = p
	}
	for _, e := range p.entries {
		if e.name == name {
			panic("impl: duplicate registration of " + pkg + "/" + name)
		}
	}
	p.entries = append(p.entries, entry{name: name, available: available, activate: activate})
	i := len(p.entries) - 1
	forced, ok := forcedName(pkg)
	switch {
	case !available:
	case ok && forced == name:
		p.active = i
		activate()
	case p.active < 0 && (!ok || !forcedAvailableEarlier(p, forced)):
		p.active = i
		activate()
	}
}

func forcedAvailableEarlier(p *pkgEntries, forced string) bool {
	return p.active >= 0 && p.entries[p.active].name == forced
}

func forcedName(pkg string) (string, bool) {
	for _, kv := range strings.Split(os.Getenv("DIFCTL_KERNELS"), ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if ok && k == pkg {
			return v, true
		}
	}
	return "", false
}

// Forced returns the implementation DIFCTL_KERNELS asks for pkg, if any.
func Forced(pkg string) (string, bool) { return forcedName(pkg) }

// List returns the implementations of pkg, best first.
func List(pkg string) []Impl {
	mu.Lock()
	defer mu.Unlock()
	p := pkgs[pkg]
	if p == nil {
		return nil
	}
	out := make([]Impl, len(p.entries))
	for i, e := range p.entries {
		out[i] = Impl{Package: pkg, Name: e.name, Available: e.available, Active: i == p.active}
	}
	return out
}

// Packages returns the names of all kernel packages that registered.
func Packages() []string {
	mu.Lock()
	defer mu.Unlock()
	out := make([]string, 0, len(pkgs))
	for k := range pkgs {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Active returns the name of the implementation of pkg in use.
func Active(pkg string) string {
	mu.Lock()
	defer mu.Unlock()
	p := pkgs[pkg]
	if p == nil || p.active < 0 {
		return ""
	}
	return p.entries[p.active].name
}

// Select makes the named implementation of pkg the active one. It fails if
// the name is unknown or the CPU cannot run it. Select is meant for tests,
// benchmarks and start-up configuration: it must not race with running
// kernels.
func Select(pkg, name string) error {
	mu.Lock()
	defer mu.Unlock()
	p := pkgs[pkg]
	if p == nil {
		return fmt.Errorf("impl: unknown kernel package %q", pkg)
	}
	for i, e := range p.entries {
		if e.name != name {
			continue
		}
		if !e.available {
			return fmt.Errorf("impl: %s implementation %q is not supported by this CPU", pkg, name)
		}
		p.active = i
		e.activate()
		return nil
	}
	return fmt.Errorf("impl: %s has no implementation %q", pkg, name)
}

// Reset makes the default (first available) implementation of pkg active.
func Reset(pkg string) {
	mu.Lock()
	defer mu.Unlock()
	p := pkgs[pkg]
	if p == nil {
		return
	}
	for i, e := range p.entries {
		if e.available {
			p.active = i
			e.activate()
			return
		}
	}
}

package store

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
)

// Opener opens a store for Open and OpenWith: url as the caller gave it
// (scheme included; a plain path for the default scheme, pebble) with the
// caller's options, of which a backend ignores those it has no use for.
type Opener func(url string, o OpenOptions) (KV, error)

var registry struct {
	mu      sync.RWMutex
	openers map[string]Opener
}

// Register makes Open accept URLs of scheme (without the colon), opened by
// open. Backends in their own packages call it from an init function, so
// that a program selects the engines it links by importing them (blockdev
// imports store/pebble, the default; difctl imports store/etcd) and this
// package imports none of them. Registering the built-in scheme mem, an
// empty scheme or one twice panics: it is a programming error found at
// start-up, not bad input.
func Register(scheme string, open Opener) {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	switch {
	case scheme == "" || scheme == "mem" || open == nil:
		panic(fmt.Sprintf("store: Register(%q): reserved scheme or nil opener", scheme))
	case registry.openers[scheme] != nil:
		panic(fmt.Sprintf("store: Register(%q): registered twice", scheme))
	}
	if registry.openers == nil {
		registry.openers = make(map[string]Opener)
	}
	registry.openers[scheme] = open
}

// registered returns the opener of scheme, if a backend registered one.
func registered(scheme string) (Opener, bool) {
	registry.mu.RLock()
	defer registry.mu.RUnlock()
	o, ok := registry.openers[scheme]
	return o, ok
}

// Schemes lists the URL schemes Open accepts, sorted: the built-in mem,
// and those registered by the backends the program links (pebble, etcd).
func Schemes() []string {
	registry.mu.RLock()
	defer registry.mu.RUnlock()
	s := append([]string{"mem"}, slices.Collect(maps.Keys(registry.openers))...)
	slices.Sort(s)
	return s
}

// RedactURL returns url with the user information of its authority (the
// "user:password@" of scheme://user:password@host/...) replaced by "***@",
// for messages that show a store URL a user typed: backends refuse
// credentials in URLs, and the refusal must not print them.
func RedactURL(url string) string {
	scheme, rest, ok := strings.Cut(url, "://")
	if !ok {
		return url
	}
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	at := strings.LastIndex(rest[:end], "@")
	if at < 0 {
		return url
	}
	return scheme + "://***@" + rest[at+1:]
}

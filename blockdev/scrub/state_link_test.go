package scrub_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/difctl/difctl/blockdev/scrub"
)

// A scrub state whose files are symbolic links is refused, and the links'
// targets are left as they were (they used to be truncated).
func TestFileScrubStateRefusesLinks(t *testing.T) {
	for _, suffix := range []string{"", ".findings", ".tmp"} {
		t.Run("link=state"+suffix, func(t *testing.T) {
			dir := t.TempDir()
			target := filepath.Join(dir, "precious")
			if err := os.WriteFile(target, []byte("keep me"), 0o644); err != nil {
				t.Fatal(err)
			}
			state := filepath.Join(dir, "state")
			if err := os.Symlink(target, state+suffix); err != nil {
				t.Fatal(err)
			}
			s, err := scrub.OpenFileState(state)
			if err == nil {
				s.Close()
				t.Fatal("OpenFileState followed a symbolic link")
			}
			if !errors.Is(err, scrub.ErrStateFile) {
				t.Errorf("error %v, want ErrStateFile", err)
			}
			if b, _ := os.ReadFile(target); string(b) != "keep me" {
				t.Errorf("the link's target now holds %q", b)
			}
		})
	}
}

// New state files are 0600 whatever the umask.
func TestFileScrubStateMode(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	s, err := scrub.OpenFileState(state)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	fi, err := os.Stat(state + ".findings")
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		t.Errorf("findings log mode %v, want 0600", fi.Mode().Perm())
	}
}

package nbdclient

import (
	"bytes"
	"crypto/tls"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/difctl/difctl/internal/pkitest"

	"github.com/difctl/difctl/blockdev/internal/nbdproto"

	"github.com/difctl/difctl/blockdev/nbd"
)

// pki is a test CA with a server certificate for localhost and a client
// certificate, written to dir under the names qemu, nbdkit and libnbd
// look for (ca-cert.pem, server-cert.pem, server-key.pem,
// client-cert.pem, client-key.pem).
type pki struct{ *pkitest.PKI }

func newPKI(t testing.TB) pki {
	t.Helper()
	return pki{pkitest.New(t, t.TempDir())}
}

// serverConfig requires and verifies client certificates of the CA.
func (p pki) serverConfig(testing.TB) *tls.Config { return p.ServerConfig() }

// caOnly is a tls-certificates directory with the CA and no client
// certificate.
func (p pki) caOnly(t testing.TB) string {
	dir := t.TempDir()
	b, err := os.ReadFile(filepath.Join(p.Dir, "ca-cert.pem"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ca-cert.pem"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// roundTrip writes, syncs and reads back a few blocks.
func roundTrip(t testing.TB, d *Device) {
	t.Helper()
	p := pattern(64<<10, 9)
	if _, err := d.WriteAt(p, 4096); err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(p))
	if _, err := d.ReadAt(got, 4096); err != nil || !bytes.Equal(got, p) {
		t.Fatalf("read back: %v, equal %v", err, bytes.Equal(got, p))
	}
}

// TestTLSRepoServer: against the repository's server with TLS and client
// certificates required, every way of configuring the client works, and
// a missing client certificate, an unknown CA or a wrong server name fail
// with ErrTLS.
func TestTLSRepoServer(t *testing.T) {
	p := newPKI(t)
	rs := startRepoServer(t, 1<<20, true, nbd.Options{TLS: p.serverConfig(t)})
	tcpHost := "nbds://" + rs.addr + "/disk?tls-hostname=localhost"
	unix := "nbds+unix:///disk?socket=" + rs.sock + "&tls-hostname=localhost"
	for _, tc := range []struct {
		name string
		url  string
		opts Options
	}{
		{"config=tls-certificates/unix", unix + "&tls-certificates=" + p.Dir, Options{}},
		{"config=tls-certificates/tcp", tcpHost + "&tls-certificates=" + p.Dir + "&tls-type=x509&tls-verify-peer=1", Options{}},
		{"config=files", "nbds+unix:///disk?socket=" + rs.sock, Options{TLSCAFile: filepath.Join(p.Dir, "ca-cert.pem"),
			TLSCertFile: filepath.Join(p.Dir, "client-cert.pem"), TLSKeyFile: filepath.Join(p.Dir, "client-key.pem"), TLSServerName: "localhost"}},
		{"config=tls.Config", "nbds://" + rs.addr + "/disk", Options{TLS: &tls.Config{RootCAs: p.CAPool,
			Certificates: []tls.Certificate{p.Client}, ServerName: "localhost"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			noLeak(t)
			d := open(t, tc.url, tc.opts)
			if !strings.HasPrefix(d.Info().TLS, "TLS 1.") {
				t.Errorf("Info().TLS %q", d.Info().TLS)
			}
			roundTrip(t, d)
			if err := d.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}

	other := newPKI(t)
	for _, tc := range []struct {
		name, url string
		want      func(error) bool
	}{
		{"fail=no-client-certificate", unix + "&tls-certificates=" + p.caOnly(t), nil},
		{"fail=unknown-CA", unix + "&tls-certificates=" + other.Dir, func(err error) bool {
			var cve *tls.CertificateVerificationError
			return errors.As(err, &cve)
		}},
		{"fail=wrong-name", "nbds+unix:///disk?socket=" + rs.sock + "&tls-hostname=elsewhere&tls-certificates=" + p.Dir, func(err error) bool {
			return strings.Contains(err.Error(), "elsewhere")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			noLeak(t)
			d, err := Open(t.Context(), tc.url, Options{})
			if err == nil {
				d.Close()
				t.Fatal("Open succeeded")
			}
			if !errors.Is(err, ErrTLS) || tc.want != nil && !tc.want(err) {
				t.Fatalf("Open: %v, want ErrTLS", err)
			}
		})
	}
}

// TestTLSRequiredNotOffered: an nbds URL to a server without TLS stops at
// NBD_OPT_STARTTLS's refusal; a plaintext URL with TLS options, and a
// unix-socket TLS URL without a name to verify, are refused before
// connecting.
func TestTLSRequiredNotOffered(t *testing.T) {
	rs := startRepoServer(t, 1<<20, false, nbd.Options{})
	p := newPKI(t)
	_, err := Open(t.Context(), "nbds+unix:///disk?socket="+rs.sock+"&tls-hostname=localhost&tls-certificates="+p.Dir, Options{})
	var oe *OptionError
	if !errors.As(err, &oe) || oe.Option != "NBD_OPT_STARTTLS" || oe.Reply != nbdproto.RepErrPolicy {
		t.Errorf("nbds to a server without TLS: %v, want an *OptionError refusing NBD_OPT_STARTTLS", err)
	}
	if _, err := Open(t.Context(), rs.unixURL("disk"), Options{TLSCAFile: filepath.Join(p.Dir, "ca-cert.pem")}); err == nil ||
		!strings.Contains(err.Error(), "plaintext") {
		t.Errorf("plaintext URL with TLS options: %v", err)
	}
	if _, err := Open(t.Context(), "nbds+unix:///disk?socket="+rs.sock, Options{}); err == nil ||
		!strings.Contains(err.Error(), "tls-hostname") {
		t.Errorf("unix TLS URL without a server name: %v", err)
	}
	if _, err := Open(t.Context(), "nbds+unix:///disk?socket="+rs.sock+"&tls-hostname=x", Options{
		TLS: &tls.Config{}, TLSCAFile: "ca.pem"}); err == nil || !strings.Contains(err.Error(), "both") {
		t.Errorf("Options.TLS with files: %v", err)
	}
}

// TestTLSNbdkit: nbdkit (GnuTLS) with --tls=require and client
// certificates verified.
func TestTLSNbdkit(t *testing.T) {
	need(t, "nbdkit")
	p := newPKI(t)
	sock := filepath.Join(t.TempDir(), "nbdkit.sock")
	startProcess(t, sock, "nbdkit", "-f", "--exit-with-parent", "-U", sock, "--tls=require",
		"--tls-certificates="+p.Dir, "--tls-verify-peer", "memory", "1M")
	base := "nbds+unix:///?socket=" + sock + "&tls-hostname=localhost&tls-certificates="
	d := open(t, base+p.Dir, Options{})
	if d.Info().TLS == "" {
		t.Error("no TLS")
	}
	roundTrip(t, d)
	if _, err := Open(t.Context(), base+p.caOnly(t), Options{}); !errors.Is(err, ErrTLS) {
		t.Errorf("without a client certificate: %v, want ErrTLS", err)
	}
	if _, err := Open(t.Context(), "nbd+unix:///?socket="+sock, Options{}); !errors.Is(err, ErrRefused) {
		t.Errorf("plaintext: %v, want ErrRefused", err)
	}
}

// TestTLSQemuNBD: qemu-nbd with tls-creds-x509 and verify-peer.
func TestTLSQemuNBD(t *testing.T) {
	need(t, "qemu-nbd")
	p := newPKI(t)
	dir := t.TempDir()
	img := filepath.Join(dir, "disk.img")
	if err := os.WriteFile(img, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "qemu.sock")
	startProcess(t, sock, "qemu-nbd", "--object", "tls-creds-x509,id=tls0,endpoint=server,verify-peer=on,dir="+p.Dir,
		"--tls-creds", "tls0", "-f", "raw", "-x", "disk", "-k", sock, "-t", "-e", "4", img)
	d := open(t, "nbds+unix:///disk?socket="+sock+"&tls-hostname=localhost&tls-certificates="+p.Dir, Options{})
	roundTrip(t, d)
}

package nbd

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/difctl/difctl/internal/pkitest"

	"github.com/difctl/difctl/blockdev/internal/nbdproto"
)

// testPKI writes a CA, a server certificate for localhost and a client
// certificate to dir, in the file names qemu's tls-creds-x509 and libnbd's
// tls-certificates directory expect (ca-cert.pem, server-cert.pem,
// server-key.pem, client-cert.pem, client-key.pem), and returns the
// server's TLS configuration, requiring client certificates from the CA.
func testPKI(t testing.TB, dir string) *tls.Config {
	t.Helper()
	return pkitest.New(t, dir).ServerConfig()
}

// TestTLS: with TLS configured, qemu-img (tls-creds-x509) and libnbd
// (tls-certificates) connect with client certificates and copy data; a
// client without TLS gets NBD_REP_ERR_TLS_REQD and a client without a
// certificate is refused.
func TestTLS(t *testing.T) {
	need(t, "qemu-img", "nbdinfo", "nbdcopy")
	dir := t.TempDir()
	pki := filepath.Join(dir, "pki")
	os.Mkdir(pki, 0o700)
	cfg := testPKI(t, pki)
	tv := newTestVolume(t, dir, 4<<20, "4096+8")
	ts := startServer(t, dir, []Export{{Name: "disk", Volume: tv.vol}}, Options{TLS: cfg})
	src := randomFile(t, dir, "src.img", 4<<20)

	// qemu-img with its x509 credentials object.
	obj := "tls-creds-x509,id=tls0,endpoint=client,dir=" + pki
	img := "driver=nbd,path=" + ts.sock + ",export=disk,tls-creds=tls0,tls-hostname=localhost"
	run(t, "qemu-img", "convert", "-n", "--object", obj, "-f", "raw", "--target-image-opts", src, img)
	run(t, "qemu-img", "compare", "--object", obj, "--image-opts", img, "driver=raw,file.filename="+src)

	// libnbd's tools.
	tlsURI := "nbds+unix:///disk?socket=" + ts.sock + "&tls-certificates=" + pki + "&tls-hostname=localhost"
	out := run(t, "nbdinfo", tlsURI)
	if !strings.Contains(out, "with TLS") {
		t.Errorf("nbdinfo over TLS:\n%s", out)
	}
	back := filepath.Join(dir, "back.img")
	run(t, "nbdcopy", tlsURI, back)
	run(t, "qemu-img", "compare", "-f", "raw", "-F", "raw", src, back)

	// Without TLS: refused with TLS_REQD (raw), and nbdinfo fails.
	rc := dialRaw(t, ts.sock)
	rc.clientFlags(nbdproto.ClientFixedNewstyle)
	rc.option(nbdproto.OptList, nil)
	if _, typ, _ := rc.optReply(); typ != nbdproto.RepErrTLSReqd {
		t.Errorf("LIST before STARTTLS: reply %#x, want NBD_REP_ERR_TLS_REQD", typ)
	}
	rc.option(nbdproto.OptStartTLS, []byte{1})
	if _, typ, _ := rc.optReply(); typ != nbdproto.RepErrInvalid {
		t.Errorf("STARTTLS with data: reply %#x, want NBD_REP_ERR_INVALID", typ)
	}
	if out, err := runErr("nbdinfo", ts.uri("disk")); err == nil {
		t.Errorf("nbdinfo without TLS succeeded:\n%s", out)
	}
	// TLS without a client certificate: the handshake fails.
	noCert := filepath.Join(dir, "nocert")
	os.Mkdir(noCert, 0o700)
	caPEM, _ := os.ReadFile(filepath.Join(pki, "ca-cert.pem"))
	os.WriteFile(filepath.Join(noCert, "ca-cert.pem"), caPEM, 0o600)
	if out, err := runErr("nbdinfo", "nbds+unix:///disk?socket="+ts.sock+"&tls-certificates="+noCert+"&tls-hostname=localhost"); err == nil {
		t.Errorf("nbdinfo without a client certificate succeeded:\n%s", out)
	}
}

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/difctl/difctl/blockdev/nbd"
)

// opensslPKI makes certificates as docs/nbd.md tells an operator to, for
// the name localhost: a CA, the server's certificate and key, and the
// credentials of three clients in directories of libnbd's and qemu's file
// names (ca-cert.pem, client-cert.pem, client-key.pem): rsa and ecdsa,
// issued by the CA, and stranger, an RSA certificate of another CA (which
// trusts the server's CA too).
const opensslPKI = `set -e
openssl req -x509 -newkey rsa:2048 -nodes -keyout ca-key.pem -out ca-cert.pem -days 3650 -subj "/CN=difctl NBD CA"

openssl req -newkey rsa:2048 -nodes -keyout server-key.pem -out server.csr -subj "/CN=localhost"
printf 'subjectAltName=DNS:localhost\nextendedKeyUsage=serverAuth\n' > server.ext
openssl x509 -req -in server.csr -CA ca-cert.pem -CAkey ca-key.pem -CAcreateserial -days 825 -extfile server.ext -out server-cert.pem

printf 'extendedKeyUsage=clientAuth\n' > client.ext
mkdir rsa ecdsa stranger
openssl req -newkey rsa:2048 -nodes -keyout rsa/client-key.pem -out rsa.csr -subj "/CN=backup-host"
openssl x509 -req -in rsa.csr -CA ca-cert.pem -CAkey ca-key.pem -CAcreateserial -days 825 -extfile client.ext -out rsa/client-cert.pem
cp ca-cert.pem rsa/
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ecdsa/client-key.pem -out ecdsa.csr -subj "/CN=backup-host"
openssl x509 -req -in ecdsa.csr -CA ca-cert.pem -CAkey ca-key.pem -CAcreateserial -days 825 -extfile client.ext -out ecdsa/client-cert.pem
cp ca-cert.pem ecdsa/

openssl req -x509 -newkey rsa:2048 -nodes -keyout other-ca-key.pem -out other-ca-cert.pem -days 3650 -subj "/CN=another CA"
openssl req -newkey rsa:2048 -nodes -keyout stranger/client-key.pem -out stranger.csr -subj "/CN=stranger"
openssl x509 -req -in stranger.csr -CA other-ca-cert.pem -CAkey other-ca-key.pem -CAcreateserial -days 825 -extfile client.ext -out stranger/client-cert.pem
cat ca-cert.pem other-ca-cert.pem > stranger/ca-cert.pem
`

// TestServeTLSClientCerts runs difctl serve --tls-cert --tls-key
// --tls-client-ca with certificates made by openssl: nbdinfo and qemu-img
// (GnuTLS) connect with the RSA and the ECDSA client certificate, and the
// certificate of another CA is refused with one line on stderr naming the
// client and the reason. (GnuTLS clients used to send no RSA certificate
// at all: the server said nothing and the client "A TLS fatal alert has
// been received".)
func TestServeTLSClientCerts(t *testing.T) {
	for _, tool := range []string{"openssl", "nbdinfo"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed (Debian: openssl, libnbd-bin)", tool)
		}
	}
	dir := t.TempDir()
	pki := filepath.Join(dir, "pki")
	os.Mkdir(pki, 0o700)
	sh := exec.Command("sh", "-c", opensslPKI)
	sh.Dir = pki
	if out, err := sh.CombinedOutput(); err != nil {
		t.Fatalf("openssl: %v\n%s", err, out)
	}
	img := filepath.Join(dir, "d.img")
	if err := os.WriteFile(img, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"protect", img}, nil, &out, &errb); code != 0 {
		t.Fatalf("protect: %d %s", code, errb.String())
	}
	sock := filepath.Join(dir, "srv.sock")
	ctx, cancel := context.WithCancel(context.Background())
	srv := startServe(t, ctx, serveOptions{Images: []string{img}, Socket: sock, MaxConns: 4,
		TLSCert: filepath.Join(pki, "server-cert.pem"), TLSKey: filepath.Join(pki, "server-key.pem"), ClientCA: filepath.Join(pki, "ca-cert.pem")})
	stderr := srv.stderr
	defer func() {
		cancel()
		if stopped, _ := srv.wait(); !stopped {
			t.Error("serve did not stop")
		}
	}()
	if srv.ended {
		t.Fatalf("serve: %v; %s", srv.err, stderr.String())
	}
	connect := map[string]func(creds string) *exec.Cmd{
		"nbdinfo": func(creds string) *exec.Cmd {
			return exec.Command("nbdinfo", "--size", "nbds+unix:///d.img?socket="+sock+"&tls-certificates="+creds+"&tls-hostname=localhost")
		},
		"qemu-img": func(creds string) *exec.Cmd {
			return exec.Command("qemu-img", "info", "--object", "tls-creds-x509,id=tls0,endpoint=client,dir="+creds,
				"--image-opts", "driver=nbd,path="+sock+",export=d.img,tls-creds=tls0,tls-hostname=localhost")
		},
	}
	refused := regexp.MustCompile(`(?m)^difctl: client \S+: TLS handshake failed: tls: failed to verify certificate: x509: certificate signed by unknown authority.*\n`)
	for _, client := range []string{"nbdinfo", "qemu-img"} {
		for _, cert := range []string{"rsa", "ecdsa", "stranger"} {
			t.Run("client="+client+"/cert="+cert, func(t *testing.T) {
				if _, err := exec.LookPath(client); err != nil {
					t.Skipf("%s is not installed", client)
				}
				before := len(refused.FindAllString(stderr.String(), -1))
				out, err := connect[client](filepath.Join(pki, cert)).CombinedOutput()
				if cert != "stranger" {
					if err != nil {
						t.Fatalf("%v\n%s\nserve: %s", err, out, stderr.String())
					}
					if !bytes.Contains(out, []byte("1048576")) && !bytes.Contains(out, []byte("1 MiB")) {
						t.Errorf("output does not give the export's size:\n%s", out)
					}
					return
				}
				if err == nil {
					t.Fatalf("connected with the certificate of another CA:\n%s", out)
				}
				// The server reports it after the client has gone.
				for deadline := time.Now().Add(5 * time.Second); len(refused.FindAllString(stderr.String(), -1)) == before; time.Sleep(10 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatalf("no line on stderr for the refused certificate:\n%s", stderr.String())
					}
				}
			})
		}
	}
	if n := strings.Count(stderr.String(), "TLS handshake failed"); n != len(refused.FindAllString(stderr.String(), -1)) {
		t.Errorf("%d failed handshakes reported, some not for the stranger's certificate:\n%s", n, stderr.String())
	}
}

// TestHandshakeLog: failed TLS handshakes are printed at most max a
// window, the number of the others when the window ends (or serve stops);
// other connection errors are not printed.
func TestHandshakeLog(t *testing.T) {
	tlsErr := func(i int) error {
		return fmt.Errorf("%w: tls: failure %d", nbd.ErrTLSHandshake, i)
	}
	var w syncBuffer
	l := &handshakeLog{w: &w, max: 3, per: time.Hour}
	for i := range 5 {
		l.connError("uid:1000", tlsErr(i))
	}
	l.connError("uid:1000", errors.New("nbd: protocol violation: x"))
	l.connError("uid:1000", tlsErr(9)) // the window is full
	l.flush()
	want := "difctl: client uid:1000: TLS handshake failed: tls: failure 0\n" +
		"difctl: client uid:1000: TLS handshake failed: tls: failure 1\n" +
		"difctl: client uid:1000: TLS handshake failed: tls: failure 2\n" +
		"difctl: 3 more failed TLS handshakes not shown (at most 3 lines a minute)\n"
	if w.String() != want {
		t.Errorf("printed:\n%s\nwant:\n%s", w.String(), want)
	}

	// A window that ends prints its count by itself; the next one prints
	// again. The client's text reaches the terminal escaped.
	var w2 syncBuffer
	l = &handshakeLog{w: &w2, max: 1, per: 50 * time.Millisecond}
	for i := range 4 {
		l.connError("10.0.0.1:5000", tlsErr(i))
	}
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(w2.String(), "3 more"); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the window's count was not printed:\n%s", w2.String())
		}
	}
	l.connError("10.0.0.1:5000", fmt.Errorf("%w: tls: \x1b[2J", nbd.ErrTLSHandshake))
	l.flush()
	want = "difctl: client 10.0.0.1:5000: TLS handshake failed: tls: failure 0\n" +
		"difctl: 3 more failed TLS handshakes not shown (at most 1 lines a minute)\n" +
		"difctl: client 10.0.0.1:5000: \"TLS handshake failed: tls: \\x1b[2J\"\n"
	if w2.String() != want {
		t.Errorf("printed:\n%s\nwant:\n%s", w2.String(), want)
	}
}

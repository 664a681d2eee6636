package nbdclient

import (
	"errors"
	"strings"
	"testing"
)

// TestParseURL checks the URL forms of the NBD URI document, the export
// names its table gives, and the redaction of userinfo.
func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		url  string
		want target
	}{
		{"nbd://example.com:10810/disk", target{network: "tcp", addr: "example.com:10810", host: "example.com", export: "disk"}},
		{"nbd://example.com/disk", target{network: "tcp", addr: "example.com:10809", host: "example.com", export: "disk"}},
		{"nbd://example.com/", target{network: "tcp", addr: "example.com:10809", host: "example.com"}},
		{"nbd://example.com", target{network: "tcp", addr: "example.com:10809", host: "example.com"}},
		{"nbd://example.com//disk", target{network: "tcp", addr: "example.com:10809", host: "example.com", export: "/disk"}},
		{"nbd://example.com/hello%20world", target{network: "tcp", addr: "example.com:10809", host: "example.com", export: "hello world"}},
		{"nbd://example.com/a/disk.img", target{network: "tcp", addr: "example.com:10809", host: "example.com", export: "a/disk.img"}},
		{"nbd://[::1]:7000/x", target{network: "tcp", addr: "[::1]:7000", host: "::1", export: "x"}},
		{"NBD://example.com/x", target{network: "tcp", addr: "example.com:10809", host: "example.com", export: "x"}},
		{"nbds://example.com/x?tls-hostname=disk.example&tls-certificates=/etc/pki&tls-type=x509&tls-verify-peer=1",
			target{tls: true, network: "tcp", addr: "example.com:10809", host: "example.com", export: "x", tlsHost: "disk.example", tlsDir: "/etc/pki"}},
		{"nbd+unix:///disk?socket=/run/nbd.sock", target{network: "unix", addr: "/run/nbd.sock", export: "disk"}},
		{"nbd+unix:///?socket=nbd.sock", target{network: "unix", addr: "nbd.sock"}},
		{"nbd+unix:///?socket=%00/abstract", target{network: "unix", addr: "@/abstract"}},
		{"nbds+unix:///disk?socket=/s&tls-hostname=h", target{tls: true, network: "unix", addr: "/s", export: "disk", tlsHost: "h"}},
	} {
		t.Run(tc.url, func(t *testing.T) {
			got, err := parseURL(tc.url)
			if err != nil {
				t.Fatal(err)
			}
			got.redacted = ""
			if *got != tc.want {
				t.Errorf("got %+v, want %+v", *got, tc.want)
			}
		})
	}
}

func TestParseURLRedacts(t *testing.T) {
	got, err := parseURL("nbds://alice@example.com/disk?tls-hostname=h")
	if err != nil {
		t.Fatal(err)
	}
	if got.redacted != "nbds://example.com/disk?tls-hostname=h" {
		t.Errorf("redacted %q", got.redacted)
	}
	for _, u := range []string{"nbd://alice:s3cret@example.com/disk", "nbd://alice:s3cret@example.com:bad/disk", "nbd://alice:s3cret@exa mple.com/"} {
		_, err := parseURL(u)
		if !errors.Is(err, ErrBadURL) || strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "alice") {
			t.Errorf("%s: %v", u, err)
		}
	}
}

func TestParseURLErrors(t *testing.T) {
	for _, u := range []string{
		"",
		"/dev/nbd0",
		"http://example.com/disk",
		"nbd:example.com",
		"nbd:///disk",
		"nbd://example.com:0/disk",
		"nbd://example.com:70000/disk",
		"nbd://example.com:/disk",
		"nbd://example.com/disk#frag",
		"nbd://example.com/disk?socket=/s",
		"nbd://example.com/disk?tls-hostname=h",
		"nbd://example.com/disk?x-thing=1",
		"nbd://example.com/a%00b",
		"nbd://example.com/" + strings.Repeat("x", 4097),
		"nbd+unix:///disk",
		"nbd+unix:///disk?socket=",
		"nbd+unix://host/disk?socket=/s",
		"nbd+unix:///disk?socket=/s&socket=/t",
		"nbds+unix:///disk?socket=/s&tls-verify-peer=0",
		"nbds+unix:///disk?socket=/s&tls-type=psk",
		"nbds+unix:///disk?socket=/s&tls-hostname=",
		"nbd+unix:///disk?socket=/s&bogus",
		"nbd+unix:///disk?socket=%zz",
	} {
		t.Run(u, func(t *testing.T) {
			_, err := parseURL(u)
			var ue *URLError
			if !errors.As(err, &ue) || !errors.Is(err, ErrBadURL) {
				t.Fatalf("%v, want a *URLError", err)
			}
		})
	}
}

// TestOptionsErrors: Open checks its options before connecting.
func TestOptionsErrors(t *testing.T) {
	for name, o := range map[string]Options{
		"MaxInflight":      {MaxInflight: -1},
		"MaxInflightBytes": {MaxInflightBytes: -1},
		"MaxPayload":       {MaxPayload: 100},
		"BlockSize":        {BlockSize: 1000},
		"BlockSize-large":  {BlockSize: 1 << 17},
		"DialTimeout":      {DialTimeout: -1},
		"cert-without-key": {TLSCertFile: "c.pem"},
	} {
		if _, err := Open(t.Context(), "nbd+unix:///?socket=/nonexistent", o); err == nil || !strings.HasPrefix(err.Error(), "nbdclient: ") ||
			strings.Contains(err.Error(), "connecting") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

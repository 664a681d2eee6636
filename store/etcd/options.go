package etcd

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/difctl/difctl/store"
)

// Environment variables read by OptionsFromEnv, and so by store.Open (every
// difctl --store flag) for etcd:// URLs. Credentials never come from the URL.
const (
	EnvUser     = "DIFCTL_ETCD_USER"      // user name for etcd authentication
	EnvPassword = "DIFCTL_ETCD_PASSWORD"  // its password
	EnvCACert   = "DIFCTL_ETCD_CACERT"    // PEM file of the CA that signed the servers' certificates
	EnvCert     = "DIFCTL_ETCD_CERT"      // PEM client certificate (with EnvKey), for mutual TLS
	EnvKey      = "DIFCTL_ETCD_KEY"       // PEM private key of EnvCert
	EnvLeaseTTL = "DIFCTL_ETCD_LEASE_TTL" // Options.LeaseTTL, a Go duration ("10s")
	EnvLockWait = "DIFCTL_ETCD_LOCK_WAIT" // Options.LockWait, a Go duration ("30s")
)

// Defaults of Options.
const (
	DefaultDialTimeout      = 5 * time.Second
	DefaultOpTimeout        = 10 * time.Second
	DefaultLeaseTTL         = 10 * time.Second
	DefaultMaxRequestBytes  = 1536 << 10 // etcd's --max-request-bytes default, 1.5 MiB
	DefaultMaxTxnOps        = 128        // etcd's --max-txn-ops default
	DefaultMaxBatchBytes    = 64 << 20
	DefaultInFlight         = 4
	DefaultCompactEvery     = 1000
	DefaultCompactRetention = 2 * time.Minute
)

// Options configure Open. The zero value of each field is its default.
type Options struct {
	// Username and Password authenticate to etcd (its auth must be enabled
	// on the server). Default none.
	Username, Password string
	// CACert, Cert and Key name PEM files. Any of them set selects TLS
	// (https endpoints): CACert verifies the servers (default: the system
	// pool), Cert and Key, set together, authenticate the client.
	CACert, Cert, Key string
	// TLS, if not nil, is used as is instead of the files above.
	TLS *tls.Config
	// DialTimeout bounds connecting to the cluster at Open. Default
	// DefaultDialTimeout (5s).
	DialTimeout time.Duration
	// OpTimeout bounds every request. A write that times out fails with an
	// error matching ErrUnavailable; it is never reported as done. Default
	// DefaultOpTimeout (10s).
	OpTimeout time.Duration
	// LeaseTTL is the lifetime of the writer lock's lease: how long after
	// its holder dies (or loses the cluster) another host can open the
	// store. Whole seconds, at least 1 (etcd may raise it to its minimum,
	// 1.5 election timeouts). Default DefaultLeaseTTL (10s).
	LeaseTTL time.Duration
	// LockWait is how long Open retries while another holder has the lock
	// before failing with a *LockedError. Default 0: fail at once.
	LockWait time.Duration
	// MaxRequestBytes and MaxTxnOps must not exceed the servers'
	// --max-request-bytes and --max-txn-ops. Defaults are etcd's own:
	// DefaultMaxRequestBytes (1.5 MiB) and DefaultMaxTxnOps (128).
	MaxRequestBytes int
	MaxTxnOps       int
	// MaxBatchBytes is the largest Batch accepted (Limits.MaxBatchBytes). A
	// batch is held in memory until Commit; one beyond a transaction is
	// committed in several (see the package documentation). Default
	// DefaultMaxBatchBytes (64 MiB).
	MaxBatchBytes int
	// InFlight is how many transactions a large commit or a bulk load keeps
	// in flight at once. Default DefaultInFlight (4).
	InFlight int
	// CompactEvery and CompactRetention pace the writer's compactions of
	// etcd's history: it compacts to the newest revision at least
	// CompactRetention old (never past one of its open iterators) once
	// that is CompactEvery revisions beyond the last compaction. Compaction
	// is cluster-wide: a read of any store on the cluster that holds a
	// snapshot longer than the retention may fail with ErrCompacted.
	// Negative CompactEvery disables compaction (leave it to the server's
	// --auto-compaction-*). Defaults DefaultCompactEvery (1000) and
	// DefaultCompactRetention (2 minutes).
	CompactEvery     int
	CompactRetention time.Duration
	// Holder describes this opener in the lock, for the error a second
	// opener gets. Default "host=HOSTNAME pid=PID".
	Holder string
	// ReadOnly opens the store as a reader: every write fails with
	// store.ErrReadOnly, and instead of the writer lock the store holds a
	// reader's key (under its own lease). Readers run together; a writer
	// and readers exclude each other, as on Pebble, since a reader
	// checking a volume while a writer changes it could find its data and
	// tuples from different moments. (store.OpenWith's ReadOnly sets it.)
	ReadOnly bool
}

// OptionsFromEnv returns Options with the fields the environment sets (see
// EnvUser and the other Env constants); the rest are defaults.
func OptionsFromEnv() (Options, error) {
	o := Options{
		Username: os.Getenv(EnvUser),
		Password: os.Getenv(EnvPassword),
		CACert:   os.Getenv(EnvCACert),
		Cert:     os.Getenv(EnvCert),
		Key:      os.Getenv(EnvKey),
	}
	for _, d := range []struct {
		env string
		to  *time.Duration
	}{{EnvLeaseTTL, &o.LeaseTTL}, {EnvLockWait, &o.LockWait}} {
		if s := os.Getenv(d.env); s != "" {
			v, err := time.ParseDuration(s)
			if err != nil || v < 0 {
				return o, fmt.Errorf("%w: etcd: %s=%q is not a duration", store.ErrInvalid, d.env, s)
			}
			*d.to = v
		}
	}
	return o, nil
}

func (o *Options) normalize() error {
	def := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.DialTimeout, DefaultDialTimeout)
	def(&o.OpTimeout, DefaultOpTimeout)
	def(&o.LeaseTTL, DefaultLeaseTTL)
	if o.MaxRequestBytes == 0 {
		o.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if o.MaxTxnOps == 0 {
		o.MaxTxnOps = DefaultMaxTxnOps
	}
	if o.MaxBatchBytes == 0 {
		o.MaxBatchBytes = DefaultMaxBatchBytes
	}
	if o.InFlight == 0 {
		o.InFlight = DefaultInFlight
	}
	if o.CompactEvery == 0 {
		o.CompactEvery = DefaultCompactEvery
	}
	def(&o.CompactRetention, DefaultCompactRetention)
	switch {
	case o.DialTimeout < 0 || o.OpTimeout < 0 || o.LockWait < 0 || o.CompactRetention < 0:
		return fmt.Errorf("%w: etcd: negative timeout", store.ErrInvalid)
	case o.LeaseTTL < time.Second:
		return fmt.Errorf("%w: etcd: lease TTL %v below 1s", store.ErrInvalid, o.LeaseTTL)
	case o.MaxRequestBytes < 1<<20+64<<10:
		return fmt.Errorf("%w: etcd: max request bytes %d below 1.0625 MiB (values up to 1 MiB must fit)", store.ErrInvalid, o.MaxRequestBytes)
	case o.MaxTxnOps < 4:
		return fmt.Errorf("%w: etcd: max txn ops %d below 4", store.ErrInvalid, o.MaxTxnOps)
	case o.MaxBatchBytes < o.MaxRequestBytes:
		return fmt.Errorf("%w: etcd: max batch bytes %d below max request bytes %d", store.ErrInvalid, o.MaxBatchBytes, o.MaxRequestBytes)
	case o.InFlight < 1 || o.InFlight > 64:
		return fmt.Errorf("%w: etcd: in-flight transactions %d, want 1..64", store.ErrInvalid, o.InFlight)
	case (o.Cert == "") != (o.Key == ""):
		return fmt.Errorf("%w: etcd: a client certificate needs both its certificate and its key file", store.ErrInvalid)
	case o.Password != "" && o.Username == "":
		return fmt.Errorf("%w: etcd: a password without a user name", store.ErrInvalid)
	}
	if o.Holder == "" {
		host, _ := os.Hostname()
		o.Holder = fmt.Sprintf("host=%s pid=%d", host, os.Getpid())
	}
	return nil
}

// tlsConfig returns the TLS configuration, nil for plain connections.
func (o *Options) tlsConfig() (*tls.Config, error) {
	if o.TLS != nil {
		return o.TLS, nil
	}
	if o.CACert == "" && o.Cert == "" {
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.CACert != "" {
		pem, err := os.ReadFile(o.CACert)
		if err != nil {
			return nil, fmt.Errorf("store: etcd: CA certificate: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: etcd: CA certificate %s holds no PEM certificate", store.ErrInvalid, o.CACert)
		}
		c.RootCAs = pool
	}
	if o.Cert != "" {
		pair, err := tls.LoadX509KeyPair(o.Cert, o.Key)
		if err != nil {
			return nil, fmt.Errorf("store: etcd: client certificate: %v", err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c, nil
}

// target is a parsed etcd:// URL.
type target struct {
	hosts  []string // host:port
	prefix string   // without leading or trailing slash
}

// String is the URL as shown in errors: it never holds credentials (a URL
// with them is refused).
func (t target) String() string { return "etcd://" + strings.Join(t.hosts, ",") + "/" + t.prefix }

// parseURL parses etcd://host1:2379,host2:2379/PREFIX. A host without a port
// gets 2379. Its errors never quote the URL's user information.
func parseURL(url string) (target, error) {
	return parseURLFor(url, "set "+EnvUser+" and "+EnvPassword)
}

// parseURLFor is parseURL whose refusal of credentials in the URL ends
// with credHint, which says where they go instead.
func parseURLFor(url, credHint string) (target, error) {
	rest, ok := strings.CutPrefix(url, "etcd://")
	if !ok {
		return target{}, fmt.Errorf("%w: etcd: URL must start with etcd://", store.ErrInvalid)
	}
	hostPart, prefix, _ := strings.Cut(rest, "/")
	if strings.Contains(hostPart, "@") {
		return target{}, fmt.Errorf("%w: etcd: credentials in the URL are refused (they would show in process lists and logs); %s", store.ErrInvalid, credHint)
	}
	if strings.ContainsAny(rest, "?#") {
		return target{}, fmt.Errorf("%w: etcd: URL takes no query or fragment; options come from the environment", store.ErrInvalid)
	}
	var t target
	for h := range strings.SplitSeq(hostPart, ",") {
		if h == "" {
			return target{}, fmt.Errorf("%w: etcd: empty host in %q", store.ErrInvalid, url)
		}
		if _, _, err := net.SplitHostPort(h); err != nil {
			h = net.JoinHostPort(strings.Trim(h, "[]"), "2379")
		}
		t.hosts = append(t.hosts, h)
	}
	if len(t.hosts) == 0 {
		return target{}, fmt.Errorf("%w: etcd: no host in %q", store.ErrInvalid, url)
	}
	t.prefix = strings.Trim(prefix, "/")
	if t.prefix == "" {
		return target{}, fmt.Errorf("%w: etcd: %q names no key prefix (etcd://HOSTS/PREFIX)", store.ErrInvalid, url)
	}
	return t, nil
}

package etcd

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/difctl/difctl/store"
)

// Environment variables read by WitnessOptionsFromEnv (difctl --witness
// etcd://...). They are the witness's own: the store's DIFCTL_ETCD_* are
// never used for it, so that whoever holds the store's credentials cannot
// write the witness.
const (
	EnvWitnessUser         = "DIFCTL_WITNESS_ETCD_USER"          // user name for etcd authentication
	EnvWitnessPassword     = "DIFCTL_WITNESS_ETCD_PASSWORD"      // its password
	EnvWitnessPasswordFile = "DIFCTL_WITNESS_ETCD_PASSWORD_FILE" // or a file holding it (one line)
	EnvWitnessCACert       = "DIFCTL_WITNESS_ETCD_CACERT"        // PEM file of the CA of the servers' certificates
	EnvWitnessCert         = "DIFCTL_WITNESS_ETCD_CERT"          // PEM client certificate (with EnvWitnessKey)
	EnvWitnessKey          = "DIFCTL_WITNESS_ETCD_KEY"           // PEM private key of EnvWitnessCert
)

// tagWitness begins the witness keys under a witness URL's PREFIX: one
// key PREFIX/w/UID per volume (see Witness).
const tagWitness = 'w'

// maxPasswordFile bounds what WitnessOptionsFromEnv reads of a password
// file.
const maxPasswordFile = 4096

// WitnessOptionsFromEnv returns the Options of a witness from the
// environment (EnvWitnessUser and the other EnvWitness constants). The
// password comes from EnvWitnessPassword or from the file named by
// EnvWitnessPasswordFile (its content less one trailing newline), not
// both.
func WitnessOptionsFromEnv() (Options, error) {
	o := Options{
		Username: os.Getenv(EnvWitnessUser),
		Password: os.Getenv(EnvWitnessPassword),
		CACert:   os.Getenv(EnvWitnessCACert),
		Cert:     os.Getenv(EnvWitnessCert),
		Key:      os.Getenv(EnvWitnessKey),
	}
	if path := os.Getenv(EnvWitnessPasswordFile); path != "" {
		if o.Password != "" {
			return o, fmt.Errorf("%w: etcd: %s and %s are exclusive: give the witness's password once", store.ErrInvalid, EnvWitnessPassword, EnvWitnessPasswordFile)
		}
		b, err := readSmallFile(path, maxPasswordFile)
		if err != nil {
			return o, fmt.Errorf("store: etcd: witness password file (%s): %w", EnvWitnessPasswordFile, err)
		}
		pw := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
		if pw == "" || strings.ContainsAny(pw, "\r\n") {
			return o, fmt.Errorf("%w: etcd: witness password file %s must hold one non-empty line", store.ErrInvalid, path)
		}
		o.Password = pw
	}
	return o, nil
}

// readSmallFile reads a file of at most max bytes.
func readSmallFile(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err == nil && int64(len(b)) > max {
		err = fmt.Errorf("%s is larger than %d bytes", path, max)
	}
	return b, err
}

// Witness keeps the seals of keyed volumes (blockdev.Witness, which it
// satisfies) in an etcd cluster, one key per volume:
//
//	PREFIX/w/UID    the volume's witness record (store.MarshalWitness)
//
// It connects with its own Options: give it credentials that may read and
// write PREFIX/ and nothing of the volumes' stores, and give the stores'
// credentials no access to PREFIX/, so that whoever can write a volume's
// device and store (even an etcd store) cannot put back an older witness.
//
// Store never moves a record backwards: it replaces the record in a
// transaction that compares the key's revision with the one it read, and
// refuses a generation below the stored one (or the same generation with
// another MAC) with a *store.WitnessAheadError, so that two writers racing
// leave the higher generation, whatever their order.
//
// A Witness is safe for concurrent use.
type Witness struct {
	cli    *clientv3.Client
	t      target
	o      Options
	base   string // PREFIX/w/
	ctx    context.Context
	cancel context.CancelFunc
	closed atomic.Bool
}

// OpenWitness connects to the witness at url (etcd://HOST[:PORT],.../PREFIX,
// as for Open) and checks within Options.DialTimeout that the cluster
// answers a read of the witness keys, so that an unreachable cluster
// (ErrUnavailable) or refused credentials (ErrAuth) fail here. Of o, only
// the connection fields apply: Username, Password, CACert, Cert, Key, TLS,
// DialTimeout and OpTimeout (which bounds each Load and Store).
func OpenWitness(url string, o Options) (*Witness, error) {
	t, err := parseURLFor(url, "set "+EnvWitnessUser+" and "+EnvWitnessPassword+" or "+EnvWitnessPasswordFile)
	if err != nil {
		return nil, err
	}
	if err := o.normalize(); err != nil {
		return nil, err
	}
	cli, err := dial(t, o)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &Witness{cli: cli, t: t, o: o, base: t.prefix + "/" + string(tagWitness) + "/", ctx: ctx, cancel: cancel}
	pctx, pcancel := context.WithTimeout(ctx, o.DialTimeout)
	_, err = cli.Get(pctx, w.base, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(1))
	pcancel()
	if err != nil {
		err = w.tr("connect", err)
		w.Close()
		return nil, err
	}
	return w, nil
}

// String returns the witness's URL (it never holds credentials).
func (w *Witness) String() string { return w.t.String() }

// Close closes the connection. Later calls fail with store.ErrClosed.
func (w *Witness) Close() error {
	if w.closed.Swap(true) {
		return store.ErrClosed
	}
	w.cancel()
	w.cli.Close()
	return nil
}

func (w *Witness) tr(op string, err error) error {
	if w.closed.Load() || errors.Is(err, context.Canceled) && w.ctx.Err() != nil {
		return store.ErrClosed
	}
	return translate(w.t, "witness "+op, err)
}

// key returns the key of volume uid, which must be 32 hex digits.
func (w *Witness) key(uid string) (string, error) {
	if _, err := hex.DecodeString(uid); err != nil || len(uid) != 32 {
		return "", fmt.Errorf("%w: etcd: witness: volume uid %q is not 32 hex digits", store.ErrInvalid, uid)
	}
	return w.base + uid, nil
}

// parse decodes the record stored under key for uid.
func (w *Witness) parse(key, uid string, v []byte) (store.WitnessRecord, error) {
	rec, err := store.ParseWitness(v)
	if err == nil && rec.VolumeUID != uid {
		err = &store.CorruptError{Record: "witness", Reason: fmt.Sprintf("holds volume %s", rec.VolumeUID)}
	}
	if err != nil {
		return store.WitnessRecord{}, fmt.Errorf("store: etcd: witness %s key %s: %w", w.t, key, err)
	}
	return rec, nil
}

// Load returns the record of volume uid (blockdev.Witness), and ok false
// if there is none. A record that does not decode, or holds another
// volume, matches store.ErrCorrupt.
func (w *Witness) Load(uid string) (store.WitnessRecord, bool, error) {
	if w.closed.Load() {
		return store.WitnessRecord{}, false, store.ErrClosed
	}
	key, err := w.key(uid)
	if err != nil {
		return store.WitnessRecord{}, false, err
	}
	ctx, cancel := context.WithTimeout(w.ctx, w.o.OpTimeout)
	defer cancel()
	resp, err := w.cli.Get(ctx, key)
	if err != nil {
		return store.WitnessRecord{}, false, w.tr("read", err)
	}
	if len(resp.Kvs) == 0 {
		return store.WitnessRecord{}, false, nil
	}
	rec, err := w.parse(key, uid, resp.Kvs[0].Value)
	return rec, err == nil, err
}

// testHookWitnessCAS, if set, runs between the read of the stored record
// and the transaction that replaces it (a writer racing in between).
var testHookWitnessCAS func()

// Store records rec (blockdev.Witness) with a compare-and-swap: the
// record replaces the stored one only if the key has not changed since it
// was read and rec's generation is above the stored one. A lower
// generation, or the same with another MAC, is refused with a
// *store.WitnessAheadError; the same record again is a no-op. A Store
// that fails with ErrUnavailable may have been applied.
func (w *Witness) Store(rec store.WitnessRecord) error {
	if w.closed.Load() {
		return store.ErrClosed
	}
	key, err := w.key(rec.VolumeUID)
	if err != nil {
		return err
	}
	val := string(store.MarshalWitness(rec))
	ctx, cancel := context.WithTimeout(w.ctx, w.o.OpTimeout)
	defer cancel()
	resp, err := w.cli.Get(ctx, key)
	if err != nil {
		return w.tr("read", err)
	}
	kvs := resp.Kvs
	for {
		if h := testHookWitnessCAS; h != nil {
			h()
		}
		// No record: put it only if there is still none.
		cmp := clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
		if len(kvs) > 0 {
			old, err := w.parse(key, rec.VolumeUID, kvs[0].Value)
			if err != nil {
				return err
			}
			switch {
			case old.Gen > rec.Gen || old.Gen == rec.Gen && !bytes.Equal(old.MAC, rec.MAC):
				return &store.WitnessAheadError{Witness: w.t.String(), VolumeUID: rec.VolumeUID, Gen: rec.Gen, StoredGen: old.Gen}
			case old.Gen == rec.Gen:
				return nil
			}
			cmp = clientv3.Compare(clientv3.ModRevision(key), "=", kvs[0].ModRevision)
		}
		tr, err := w.cli.Txn(ctx).If(cmp).Then(clientv3.OpPut(key, val)).Else(clientv3.OpGet(key)).Commit()
		if err != nil {
			return w.tr("update", err)
		}
		if tr.Succeeded {
			return nil
		}
		// Another writer changed the key since it was read: compare again
		// with what it wrote.
		kvs = tr.Responses[0].GetResponseRange().Kvs
	}
}

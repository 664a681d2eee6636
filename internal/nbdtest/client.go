// Package nbdtest is a minimal NBD client for the tests of the packages
// above blockdev/nbd (metrics, cmd/difctl), which cannot count on qemu or
// libnbd being installed: fixed newstyle negotiation with NBD_OPT_GO and
// simple replies, one request at a time.
package nbdtest

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"time"
)

// Protocol constants (NetworkBlockDevice/nbd doc/proto.md).
const (
	magicInit     = 0x4e42444d41474943
	magicOpt      = 0x49484156454F5054
	magicOptReply = 0x0003e889045565a9
	magicRequest  = 0x25609513
	magicSimple   = 0x67446698

	optGo    = 7
	repAck   = 1
	repInfo  = 3
	cmdRead  = 0
	cmdWrite = 1
	cmdDisc  = 2
	cmdFlush = 3

	// RepErrPolicy is the option reply of a server that refuses an
	// export by policy (a full export).
	RepErrPolicy = 1<<31 + 2
	// EIO is the error of a reply about data that cannot be read.
	EIO = 5
)

// OptionError is a refusal of NBD_OPT_GO.
type OptionError struct {
	Type uint32 // the reply type, RepErrPolicy for example
	Msg  string
}

func (e *OptionError) Error() string {
	return fmt.Sprintf("nbd: option refused (%#x): %s", e.Type, e.Msg)
}

// ReplyError is an error reply to a request.
type ReplyError struct{ Code uint32 }

func (e *ReplyError) Error() string { return fmt.Sprintf("nbd: request failed with error %d", e.Code) }

// Client is a connection in the transmission phase.
type Client struct {
	c      net.Conn
	Size   uint64 // the export's size
	cookie uint64
}

// Dial connects to the server at network, addr and asks for export. A
// refusal is an *OptionError; the connection is closed then.
func Dial(network, addr, export string) (*Client, error) {
	nc, err := net.Dial(network, addr)
	if err != nil {
		return nil, err
	}
	nc.SetDeadline(time.Now().Add(30 * time.Second))
	c := &Client{c: nc}
	if err := c.negotiate(export); err != nil {
		nc.Close()
		return nil, err
	}
	return c, nil
}

func (c *Client) negotiate(export string) error {
	var h [18]byte
	if _, err := io.ReadFull(c.c, h[:]); err != nil {
		return err
	}
	if binary.BigEndian.Uint64(h[0:]) != magicInit || binary.BigEndian.Uint64(h[8:]) != magicOpt {
		return fmt.Errorf("nbd: greeting % x", h)
	}
	var data []byte
	data = binary.BigEndian.AppendUint32(data, uint32(len(export)))
	data = append(data, export...)
	data = binary.BigEndian.AppendUint16(data, 0) // no information requests
	var msg []byte
	msg = binary.BigEndian.AppendUint32(msg, 1|2) // fixed newstyle, no zeroes
	msg = binary.BigEndian.AppendUint64(msg, magicOpt)
	msg = binary.BigEndian.AppendUint32(msg, optGo)
	msg = binary.BigEndian.AppendUint32(msg, uint32(len(data)))
	if _, err := c.c.Write(append(msg, data...)); err != nil {
		return err
	}
	for {
		var rh [20]byte
		if _, err := io.ReadFull(c.c, rh[:]); err != nil {
			return err
		}
		if binary.BigEndian.Uint64(rh[0:]) != magicOptReply {
			return fmt.Errorf("nbd: option reply % x", rh)
		}
		typ := binary.BigEndian.Uint32(rh[12:])
		body := make([]byte, binary.BigEndian.Uint32(rh[16:]))
		if _, err := io.ReadFull(c.c, body); err != nil {
			return err
		}
		switch {
		case typ == repAck:
			return nil
		case typ == repInfo && len(body) >= 12 && binary.BigEndian.Uint16(body) == 0:
			c.Size = binary.BigEndian.Uint64(body[2:])
		case typ&(1<<31) != 0:
			return &OptionError{Type: typ, Msg: string(body)}
		}
	}
}

// header is a request's header.
func header(typ uint16, cookie, off uint64, length uint32) []byte {
	var msg []byte
	msg = binary.BigEndian.AppendUint32(msg, magicRequest)
	msg = binary.BigEndian.AppendUint16(msg, 0)
	msg = binary.BigEndian.AppendUint16(msg, typ)
	msg = binary.BigEndian.AppendUint64(msg, cookie)
	msg = binary.BigEndian.AppendUint64(msg, off)
	return binary.BigEndian.AppendUint32(msg, length)
}

// request sends one request and reads its simple reply, with n bytes of
// data if it succeeded.
func (c *Client) request(typ uint16, off uint64, length uint32, payload []byte, n int) ([]byte, error) {
	c.cookie++
	if _, err := c.c.Write(append(header(typ, c.cookie, off, length), payload...)); err != nil {
		return nil, err
	}
	var h [16]byte
	if _, err := io.ReadFull(c.c, h[:]); err != nil {
		return nil, err
	}
	if binary.BigEndian.Uint32(h[0:]) != magicSimple || binary.BigEndian.Uint64(h[8:]) != c.cookie {
		return nil, fmt.Errorf("nbd: reply % x", h)
	}
	if code := binary.BigEndian.Uint32(h[4:]); code != 0 {
		return nil, &ReplyError{Code: code}
	}
	out := make([]byte, n)
	_, err := io.ReadFull(c.c, out)
	return out, err
}

// Read reads n bytes at off.
func (c *Client) Read(off uint64, n int) ([]byte, error) {
	return c.request(cmdRead, off, uint32(n), nil, n)
}

// Write writes p at off.
func (c *Client) Write(off uint64, p []byte) error {
	_, err := c.request(cmdWrite, off, uint32(len(p)), p, 0)
	return err
}

// Flush asks for every write to be durable.
func (c *Client) Flush() error {
	_, err := c.request(cmdFlush, 0, 0, nil, 0)
	return err
}

// Close disconnects (NBD_CMD_DISC) and closes the connection.
func (c *Client) Close() error {
	c.c.Write(header(cmdDisc, 0, 0, 0))
	return c.c.Close()
}

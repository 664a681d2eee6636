package main

import (
	"errors"

	"github.com/difctl/difctl/dif"
)

// integrityError ends a command that found blocks failing verification and
// left them as they are: exit 4. It matches dif.ErrIntegrity. err, if not
// nil, is the library's failure, printed after msg and kept in the chain.
type integrityError struct {
	msg string
	err error
}

func (e *integrityError) Error() string {
	if e.err != nil {
		return e.msg + ": " + e.err.Error()
	}
	return e.msg
}

func (e *integrityError) Is(target error) bool { return target == dif.ErrIntegrity }
func (e *integrityError) Unwrap() error        { return e.err }

// isIntegrityErr reports whether err is an integrity failure of any kind,
// the library's (a *dif.CheckError, a Volume's *IntegrityError) or a verdict.
func isIntegrityErr(err error) bool { return errors.Is(err, dif.ErrIntegrity) }

// isIntegrity reports whether err is the verdict a summary returns when
// blocks failed (an *integrityError), as opposed to an error writing it.
func isIntegrity(err error) bool {
	_, ok := err.(*integrityError)
	return ok
}

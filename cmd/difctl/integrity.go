package main

import (
	"errors"

	"github.com/difctl/difctl/dif"
)

// integrityError ends a command that found blocks failing verification and
// left them as they are: exit 4. It matches dif.ErrIntegrity.
type integrityError struct{ msg string }

func (e *integrityError) Error() string        { return e.msg }
func (e *integrityError) Is(target error) bool { return target == dif.ErrIntegrity }

// isIntegrityErr reports whether err is an integrity failure of any kind,
// the library's (a *dif.CheckError, a Volume's *IntegrityError) or a verdict.
func isIntegrityErr(err error) bool { return errors.Is(err, dif.ErrIntegrity) }

// isIntegrity reports whether err is the verdict a summary returns when
// blocks failed (an *integrityError), as opposed to an error writing it.
func isIntegrity(err error) bool {
	_, ok := err.(*integrityError)
	return ok
}

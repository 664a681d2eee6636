package main

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/difctl/difctl/dif"
)

// Exit codes, a bit mask as in fsck(8). A run can set several bits, for
// example 1|4 when a scrub repaired some blocks and left others failing.
const (
	exitOK          = 0  // clean: no error
	exitCorrected   = 1  // errors were found and corrected
	exitUncorrected = 4  // errors left uncorrected (integrity failures found)
	exitOperational = 8  // operational error: I/O, missing file, bad store
	exitUsage       = 16 // usage error: bad flag, argument or command
	exitCancelled   = 32 // cancelled by the user (SIGINT or SIGTERM)
)

// exitMeaning is the text each command's help shows for the codes it lists.
var exitMeaning = map[int]string{
	exitOK:          "success, nothing wrong found",
	exitCorrected:   "errors found and corrected",
	exitUncorrected: "integrity errors found and left uncorrected",
	exitOperational: "operational error (unreadable file, I/O error, bad store)",
	exitUsage:       "usage error (bad flag, argument or command)",
	exitCancelled:   "cancelled by the user (SIGINT or SIGTERM)",
}

// exitCodesHelp renders the "Exit status" section of a command's help.
func exitCodesHelp(codes ...int) string {
	var b strings.Builder
	b.WriteString("Exit status (a bit mask, as in fsck(8)):\n")
	for _, c := range codes {
		fmt.Fprintf(&b, "  %-3d %s\n", c, exitMeaning[c])
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// exitError carries an explicit exit code out of a command. Commands that
// process many items report each failure themselves as they go (a stderr
// line and, with --json, an "error" record) and finish with an exitError
// whose err is nil, so main prints nothing more. A non-nil err is printed
// by main as the one-line cause.
type exitError struct {
	code int   // bit mask of the exit codes above
	err  error // cause; nil when already reported
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// status accumulates the outcome of a command that processes many items
// and goes on after a failure (crc over several files, later scrub).
type status struct{ code int }

// add records an outcome; codes combine as a bit mask.
func (s *status) add(code int) { s.code |= code }

// err returns nil when every item was clean, or an already-reported
// exitError with the accumulated mask.
func (s *status) err() error {
	if s.code == exitOK {
		return nil
	}
	return &exitError{code: s.code}
}

// usageError marks an error caused by how the command was invoked. Errors
// cobra returns before a command runs (flag parsing, argument counts) are
// usage errors without being marked; commands mark the ones they find
// themselves (conflicting flags, a bad value discovered late).
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usageErrorf(format string, args ...any) error {
	return &usageError{err: fmt.Errorf(format, args...)}
}

// errInterrupted is the marker of a cancellation by the user: the context
// of every command is cancelled with a cause that matches it when SIGINT or
// SIGTERM arrives.
var errInterrupted = errors.New("cancelled by the user")

// exitCode is the one place where errors become exit codes. ran tells
// whether a command's RunE was reached: cobra's own errors before that
// (unknown flag, bad flag value, wrong number of arguments) are usage
// errors.
func exitCode(ctx context.Context, err error, ran bool) int {
	code := classify(err, ran)
	if ctx.Err() != nil && errors.Is(context.Cause(ctx), errInterrupted) {
		// Keep what was found before the interrupt, drop the operational
		// bit the interrupted I/O may have caused.
		code = exitCancelled | code&(exitCorrected|exitUncorrected)
	}
	return code
}

func classify(err error, ran bool) int {
	var ee *exitError
	var ue *usageError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ee):
		return ee.code
	case errors.As(err, &ue) || !ran:
		return exitUsage
	case errors.Is(err, errInterrupted):
		return exitCancelled
	case errors.Is(err, dif.ErrIntegrity):
		return exitUncorrected
	default:
		return exitOperational
	}
}

// errorLine returns the one-line message main prints for err, or "" when
// there is nothing to print (the command already reported).
func errorLine(ctx context.Context, err error) string {
	if ctx.Err() != nil && errors.Is(context.Cause(ctx), errInterrupted) {
		return context.Cause(ctx).Error()
	}
	var ee *exitError
	if err == nil || errors.As(err, &ee) && ee.err == nil {
		return ""
	}
	return shortMessage(err)
}

// libraryPrefix matches the package prefix of a library error at the start
// of a message or of a cause within it.
var libraryPrefix = regexp.MustCompile(`(^|: )(?:store|blockdev|scrub): `)

// shortMessage is err's message as difctl prints it: on one line, and
// without the package prefixes ("store: ", "blockdev: ", "scrub: ") that
// the library's errors carry, since the command's own words say where the
// failure happened. Errors are wrapped whole (%w) and shortened only here,
// when printed, so that errors.Is and errors.As see the whole chain.
func shortMessage(err error) string {
	s := oneLine(err.Error())
	for {
		t := libraryPrefix.ReplaceAllString(s, "$1")
		if t == s {
			return s
		}
		s = t
	}
}

// oneLine folds a message onto one line: cobra and wrapped errors may
// carry newlines, and difctl prints every error as a single line.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

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

// interrupted returns the error of a command the user interrupted after it
// found failures: the cause, with exit bit 4 kept (exitCode adds 32).
func interrupted(ctx context.Context, failed int64) error {
	if failed > 0 {
		return &exitError{code: exitUncorrected, err: context.Cause(ctx)}
	}
	return context.Cause(ctx)
}

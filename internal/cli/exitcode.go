package cli

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"
)

// The exit codes, one table for every command (printed by `sluice --help`,
// documented in README.md). Scripts tell a typo in a flag from a host that
// does not match its file, and both from a broken host.
const (
	ExitOK          = 0 // done; the check passed
	ExitFailure     = 1 // the command could not do its job: bad file, kernel refusal, daemon unreachable
	ExitUsage       = 2 // the command line is wrong: unknown command or flag, bad flag value, missing argument
	ExitCheckFailed = 3 // the command ran and found a difference: verify, tune check, doctor, plan --exit-code
	ExitUnavailable = 4 // this host cannot run it: the kernel lacks a feature (lab up: use --vm), no test VM
)

// exitCodesHelp is the table as `sluice --help` prints it.
const exitCodesHelp = `Exit codes:
  0  done; the check passed
  1  failure: the command could not do its job (bad file, kernel refusal, ...)
  2  usage error: unknown command or flag, bad flag value, missing argument
  3  check failed: verify, tune check or doctor found a difference, or
     plan --exit-code has steps pending
  4  unavailable here: the kernel lacks a feature (lab up: use --vm) or the
     test VM cannot run
  vm run and lab up --vm exit with the command's own exit code.`

// ExitError carries a specific process exit code (ExitCheckFailed,
// ExitUnavailable, a VM command's own code) without printing a stack trace.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string { return e.Err.Error() }
func (e *ExitError) Unwrap() error { return e.Err }

// ExitCode maps an error returned by Run to the process exit code.
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		return ee.Code
	}
	return ExitFailure
}

// usageErrorf is a flag or argument a command refuses after cobra parsed it
// (a NaN rate, a negative count): exit 2 like cobra's own usage errors.
func usageErrorf(format string, args ...any) error {
	return &ExitError{Code: ExitUsage, Err: fmt.Errorf(format, args...)}
}

// checkFailed is a command that ran and found a difference: exit 3.
func checkFailed(err error) error { return &ExitError{Code: ExitCheckFailed, Err: err} }

// ranError marks an error returned by a command's RunE, so that Execute can
// tell it from cobra's own errors, which are all about the command line.
type ranError struct{ err error }

func (e *ranError) Error() string { return e.err.Error() }
func (e *ranError) Unwrap() error { return e.err }

// markRunErrors wraps the RunE of c and all its subcommands in ranError.
func markRunErrors(c *cobra.Command) {
	if run := c.RunE; run != nil {
		c.RunE = func(cmd *cobra.Command, args []string) error {
			if err := run(cmd, args); err != nil {
				return &ranError{err}
			}
			return nil
		}
	}
	for _, sub := range c.Commands() {
		markRunErrors(sub)
	}
}

// Execute runs root (built by NewRoot) and returns an error whose ExitCode
// follows the table: cobra's errors (unknown command or flag, a flag value
// that does not parse, a wrong argument count, a required flag missing)
// become usage errors pointing at --help.
func Execute(root *cobra.Command) error {
	cmd, err := root.ExecuteC()
	if err == nil {
		return nil
	}
	var ran *ranError
	if errors.As(err, &ran) {
		return ran.err
	}
	return &ExitError{Code: ExitUsage, Err: fmt.Errorf("%w\nrun '%s --help' for usage", err, cmd.CommandPath())}
}

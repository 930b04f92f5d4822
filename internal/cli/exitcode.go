// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"cmp"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
)

// The exit codes, one table for every command (printed by `sluice --help`
// and, for the codes each command returns, by its own --help; documented in
// README.md). Scripts tell a typo in a flag from a host that does not match
// its file, and both from a broken host.
const (
	ExitOK          = 0 // done; the check passed
	ExitFailure     = 1 // the command could not do its job: bad file, kernel refusal, daemon unreachable
	ExitUsage       = 2 // the command line is wrong: unknown command or flag, bad flag value, missing argument
	ExitCheckFailed = 3 // the command ran and found a difference: verify, tune check, doctor, plan --exit-code
	ExitUnavailable = 4 // this host cannot run it: the kernel lacks a feature (lab up: use --vm), no test VM
)

// exitTable is what each code means, in the words of every --help.
var exitTable = []struct {
	code    int
	meaning string
}{
	{ExitOK, "done; the check passed"},
	{ExitFailure, "failure: the command could not do its job (bad file, kernel refusal, ...)"},
	{ExitUsage, "usage error: unknown command or flag, bad flag value, missing argument"},
	{ExitCheckFailed, "check failed: the command ran and found a difference"},
	{ExitUnavailable, "unavailable here: the kernel lacks a feature or the test VM cannot run"},
}

// passthroughExit marks a command that exits with another command's code.
const passthroughExit = -1

// exitAnnotation is the cobra annotation under which a command declares
// the codes it returns beyond 0, 1 and 2 (which every command can return).
const exitAnnotation = "sluice.exit."

// exits declares that cmd returns code, and when: the text after the code in
// cmd's generated "Exit codes:" help. passthroughExit says that the command
// exits with another command's code.
func exits(cmd *cobra.Command, code int, when string) *cobra.Command {
	if cmd.Annotations == nil {
		cmd.Annotations = map[string]string{}
	}
	cmd.Annotations[exitAnnotation+strconv.Itoa(code)] = when
	return cmd
}

// exitCodesHelp is the whole table as `sluice --help` prints it, naming
// the commands that declare each code beyond 2.
func exitCodesHelp(root *cobra.Command) string {
	users := map[int][]string{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, e := range append(exitTable, struct {
			code    int
			meaning string
		}{passthroughExit, ""}) {
			if _, ok := c.Annotations[exitAnnotation+strconv.Itoa(e.code)]; ok {
				users[e.code] = append(users[e.code], strings.TrimPrefix(c.CommandPath(), root.Name()+" "))
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	var b strings.Builder
	b.WriteString("Exit codes:\n")
	for _, e := range exitTable {
		fmt.Fprintf(&b, "  %d  %s\n", e.code, e.meaning)
		if u := users[e.code]; e.code > ExitUsage && len(u) > 0 {
			fmt.Fprintf(&b, "     (%s)\n", strings.Join(u, ", "))
		}
	}
	if u := users[passthroughExit]; len(u) > 0 {
		fmt.Fprintf(&b, "  %s exit with the command's own exit code.", strings.Join(u, " and "))
	}
	return strings.TrimRight(b.String(), "\n")
}

// addExitCodeHelp appends to the help of every runnable command under c the
// codes it can return, from exitTable and the command's exits declarations,
// so that the help cannot say one code while the code returns another.
func addExitCodeHelp(c *cobra.Command) {
	for _, sub := range c.Commands() {
		addExitCodeHelp(sub)
	}
	if c.RunE == nil || c.Parent() == nil {
		return
	}
	var b strings.Builder
	b.WriteString("Exit codes:\n")
	for _, e := range exitTable {
		when, declared := c.Annotations[exitAnnotation+strconv.Itoa(e.code)]
		switch {
		case e.code <= ExitUsage:
			fmt.Fprintf(&b, "  %d  %s\n", e.code, e.meaning)
		case declared:
			fmt.Fprintf(&b, "  %d  %s: %s\n", e.code, e.meaning[:strings.Index(e.meaning, ":")], when)
		}
	}
	if when, ok := c.Annotations[exitAnnotation+strconv.Itoa(passthroughExit)]; ok {
		fmt.Fprintf(&b, "  %s\n", when)
	}
	c.Long = strings.TrimRight(cmp.Or(c.Long, c.Short), "\n") + "\n\n" + strings.TrimRight(b.String(), "\n")
}

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

// Execute runs root (built by NewRootCommand) and returns an error whose ExitCode
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
